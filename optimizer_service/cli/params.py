"""Click parameter types and output helpers shared by the verbs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from optimizer_service.errors import InvalidInputError
from optimizer_service.files import replace_file
from optimizer_service.units import parse_bytes


class IntList(click.ParamType):
    """``4,16`` or ``[4 16]`` → ``(4, 16)``."""

    name = "LIST"

    def convert(self, value: Any, param, ctx) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip().strip("[]()")
        parts = [p for p in re.split(r"[,\s]+", text) if p]
        if not parts or not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
            self.fail(f"{value!r} is not a list of whole numbers like 4,16", param, ctx)
        return tuple(int(p) for p in parts)


class ByteSize(click.ParamType):
    """``268435456``, ``256MiB``, ``1GB`` → bytes."""

    name = "BYTES"

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


def write_json(data: Any, out: str) -> None:
    """Write ``data`` to ``out`` (``-`` is stdout). Files are replaced atomically,
    so a failure never leaves half a file behind."""
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if out == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(out)
    if path.is_dir():
        raise InvalidInputError(f"--json {out}: is a directory; give a file name")
    if not path.parent.exists():
        raise InvalidInputError(f"--json {out}: folder {path.parent} does not exist")
    replace_file(path, text)


def read_trace(path: Path) -> dict:
    """An enforcer trace file as parsed JSON, or one line saying why it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInputError(f"trace file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"trace file {path} cannot be read: {error.__class__.__name__}") from None
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"trace file {path} is not JSON: {error.msg} at line {error.lineno}") from None
