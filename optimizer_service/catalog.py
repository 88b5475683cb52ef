"""Where topologies come from: built-in presets and YAML files (the shell side
of :mod:`optimizer_service.hardware.topology`, which only parses text)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology

_PRESETS = "optimizer_service.hardware.presets"


def preset_names() -> list[str]:
    """Names of the built-in topologies, sorted."""
    return sorted(p.name[:-5] for p in resources.files(_PRESETS).iterdir() if p.name.endswith(".yaml"))


def load_topology(name_or_path: str) -> Topology:
    """A preset by name, or a YAML file by path."""
    if name_or_path in preset_names():
        text = resources.files(_PRESETS).joinpath(f"{name_or_path}.yaml").read_text(encoding="utf-8")
        return Topology.from_yaml(text, source=f"preset {name_or_path}")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidInputError(f"topology file {name_or_path} does not exist") from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"topology file {name_or_path} cannot be read: {exc.__class__.__name__}") from None
        return Topology.from_yaml(text, source=str(path))
    raise InvalidInputError(
        f"unknown topology {name_or_path!r}: not a preset ({', '.join(preset_names())}) nor a YAML file")
