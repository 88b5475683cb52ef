"""What a plan store accepts, checked before any I/O: the limits in one place,
job ids that can only ever name their own keys, and documents that are JSON
objects. Every refusal is a one-line :class:`StoreInputError` naming the bad value."""

from __future__ import annotations

import json
import math
import re

from optimizer_service.service.store.base import StoreError, StoreInputError

MAX_PLAN_BYTES = 64 * 1024 * 1024
"""Largest plan text (UTF-8 bytes)."""
MAX_DOCUMENT_BYTES = 1024 * 1024
"""Largest job document, plan state, log record or telemetry summary (UTF-8 bytes of its JSON)."""
MAX_DOCUMENT_DEPTH = 64
"""Deepest nesting of lists and objects in a document."""
MAX_VERSION = 2**53 - 1
"""Largest plan version: exact in a double, which is how Redis's Lua sees numbers."""
MAX_EPOCH = 2**53 - 1
"""Largest coordinator epoch (exact in Redis's Lua numbers too)."""
MAX_TELEMETRY_KEEP = 1_000_000
"""Most telemetry summaries one job may keep."""

JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_JOB_ID_RULE = "use 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit"


def preview(value: object, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, for messages about client values."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def check_job_id(job_id: object) -> str:
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id):
        raise StoreInputError(f"job id {preview(job_id)} is invalid: {_JOB_ID_RULE}")
    return job_id


def check_version(version: object) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise StoreInputError(f"plan version {preview(version)} is invalid: use an integer from 1 to {MAX_VERSION}")
    return version


def check_plan_json(plan_json: object) -> str:
    if not isinstance(plan_json, str):
        raise StoreInputError(f"plan text must be a str, not {type(plan_json).__name__}")
    if len(plan_json) > MAX_PLAN_BYTES:       # characters never outnumber UTF-8 bytes: refuse before encoding
        raise StoreInputError(f"plan text of {len(plan_json)} characters exceeds {MAX_PLAN_BYTES} bytes")
    try:
        size = len(plan_json.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise StoreInputError(f"plan text is not valid Unicode: {error.reason} at character {error.start}") from None
    if size > MAX_PLAN_BYTES:
        raise StoreInputError(f"plan text of {size} bytes exceeds {MAX_PLAN_BYTES} bytes")
    return plan_json


def check_submitted(submitted_unix: object) -> float:
    if isinstance(submitted_unix, bool) or not isinstance(submitted_unix, (int, float)) \
            or not math.isfinite(submitted_unix):
        raise StoreInputError(f"submitted_unix {preview(submitted_unix)} is not a finite number")
    return float(submitted_unix)


def check_count(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StoreInputError(f"{name}={preview(value)} is invalid: use an integer from {low} to {high}")
    return value


def _json_problem(value: object, path: str, depth: int) -> str | None:
    """Where ``value`` stops being plain JSON (None if it is): a dict with str keys,
    lists or tuples, str, int, finite float, bool or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if depth >= MAX_DOCUMENT_DEPTH:
        return f"{path} nests deeper than {MAX_DOCUMENT_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the key {preview(key)}, which is not a str"
            problem = _json_problem(item, f"{path}[{key!r}]", depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]", depth + 1)
            if problem:
                return problem
        return None
    return f"{path} is a {type(value).__name__}, which JSON cannot hold"


def encode_document(document: object, what: str) -> str:
    """``document`` as compact JSON text, or a :class:`StoreInputError` naming the
    part that is not JSON or saying by how much it is too large."""
    if not isinstance(document, dict):
        raise StoreInputError(f"{what} must be a JSON object (dict), not {type(document).__name__}")
    problem = _json_problem(document, what, 0)
    if problem:
        raise StoreInputError(problem)
    try:
        text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise StoreInputError(f"{what} holds text that is not valid Unicode: {error.reason}") from None
    if size > MAX_DOCUMENT_BYTES:
        raise StoreInputError(f"{what} of {size} bytes of JSON exceeds {MAX_DOCUMENT_BYTES} bytes")
    return text


def decode_document(text: str | bytes, what: str) -> dict:
    """A document read back; stored text that is not a JSON object means the store was
    written by something else, which is reported rather than passed on."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise StoreError(f"stored {what} is not JSON: {one_line(error)}") from None
    if not isinstance(document, dict):
        raise StoreError(f"stored {what} is not a JSON object")
    return document
