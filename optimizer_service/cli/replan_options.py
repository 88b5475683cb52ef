"""``p2 serve``'s replanning options as values: ``--policy KEY=VALUE`` and ``--topology``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.errors import InvalidInputError


def policy_config(items: tuple[str, ...]) -> PolicyConfig:
    """A policy config from ``KEY=VALUE`` items over the defaults."""
    defaults = PolicyConfig()
    known = {f.name: f for f in dataclasses.fields(PolicyConfig)}
    values: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in known:
            raise InvalidInputError(f"--policy {item!r}: give KEY=VALUE with KEY one of {', '.join(known)}")
        kind = type(getattr(defaults, key))
        try:
            values[key] = kind(text)
        except ValueError:
            raise InvalidInputError(f"--policy {item!r}: {key} takes a {kind.__name__}") from None
    return PolicyConfig(**values)       # checks the combination (one line on a bad one)


def policy_help() -> str:
    defaults = PolicyConfig()
    lines = ["--policy KEY=VALUE settings and their defaults (optimizer_service/control/policy_config.py says why):"]
    lines += [f"  {f.name}={getattr(defaults, f.name)}" for f in dataclasses.fields(PolicyConfig)]
    return "\n".join(lines)


def topology_text(value: str | None) -> str:
    """``--topology``: a preset name as it is, a file's YAML, or "" for none."""
    if not value:
        return ""
    if value in preset_names():
        return value
    path = Path(value)
    if not path.is_file():
        raise InvalidInputError(f"--topology {value!r} is neither a preset ({', '.join(preset_names())}) nor a file")
    load_topology(value)            # validated now, not at the first search
    return path.read_text()
