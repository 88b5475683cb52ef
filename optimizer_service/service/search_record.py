"""A live search's inputs and outcome, kept to be searched again (issue 32, item 3).

``p2 serve --record-searches DIR`` (``P2_SEARCH_RECORDS``) writes one file per
search of the replanning loop, ``DIR/JOB-vVERSION.json``: what
:func:`optimizer_service.service.planning.search` was given (every rank's
trace window, the topology, the seed, the running plan, the evaluations, the
cluster state's prior fit) and what it gave (:meth:`SearchOutcome.to_dict
<optimizer_service.service.planning.SearchOutcome.to_dict>` and the plan).
The same inputs give the same plan: a search stops by its evaluations, never
by the clock. So a record can be searched again off the job, with another
seed or another model, and the outcome compared with the one the job
measured (``benchmarks/replay.py``): a model change is tried on the windows
a real run saw without running the job again.

Writing is the shell's (the replanner calls :func:`write` off the event
loop); a record that cannot be written costs only the record. :func:`read`
checks a file before anything uses it, and says in one line what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from optimizer_service.errors import InvalidInputError
from optimizer_service.files import replace_file

FORMAT = "p2-search-record/1"
MAX_RECORD_BYTES = 256 * 1024 * 1024     # a record read back is at most this large
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class SearchRecord:
    """One search: its inputs (the arguments of :func:`planning.search
    <optimizer_service.service.planning.search>`) and what it found."""

    job_id: str
    version: int
    cluster: str
    traces: list[dict]
    topology_yaml: str
    seed: int
    running_plan_json: str | None
    evaluations: int | None
    prior_fit: dict | None
    plan_json: str
    outcome: dict

    def to_dict(self) -> dict:
        return {"format": FORMAT, "job_id": self.job_id, "version": self.version, "cluster": self.cluster,
                "inputs": {"traces": self.traces, "topology_yaml": self.topology_yaml, "seed": self.seed,
                           "running_plan_json": self.running_plan_json, "evaluations": self.evaluations,
                           "prior_fit": self.prior_fit},
                "plan_json": self.plan_json, "outcome": self.outcome}

    @classmethod
    def from_dict(cls, data: Mapping, source: str = "the record") -> SearchRecord:
        """The record ``data`` holds; :class:`InvalidInputError` naming ``source`` and the field otherwise."""
        def field(where: Mapping, name: str, kinds: tuple[type, ...], optional: bool = False):
            value = where.get(name)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise InvalidInputError(f"{source}: field {name!r} is missing or not a "
                                        f"{' or '.join(kind.__name__ for kind in kinds)}; "
                                        f"write records with 'p2 serve --record-searches DIR'")
            return value

        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InvalidInputError(f"{source} is not a search record (its 'format' is not {FORMAT!r}); "
                                    "write records with 'p2 serve --record-searches DIR'")
        inputs = field(data, "inputs", (dict,))
        traces = field(inputs, "traces", (list,))
        if not traces or not all(isinstance(trace, dict) for trace in traces):
            raise InvalidInputError(f"{source}: 'inputs.traces' must be a non-empty list of rank traces")
        return cls(field(data, "job_id", (str,)), field(data, "version", (int,)), field(data, "cluster", (str,)),
                   traces, field(inputs, "topology_yaml", (str,)), field(inputs, "seed", (int,)),
                   field(inputs, "running_plan_json", (str,), optional=True),
                   field(inputs, "evaluations", (int,), optional=True),
                   field(inputs, "prior_fit", (dict,), optional=True),
                   field(data, "plan_json", (str,)), field(data, "outcome", (dict,)))


def file_name(job_id: str, version: int) -> str:
    """``JOB-vVERSION.json``, the job id made safe for a file name."""
    return f"{_UNSAFE.sub('_', job_id)[:100]}-v{version}.json"


def file_order(path: Path) -> tuple[str, int]:
    """A record file's place among its folder's: by job, then version (:func:`file_name` read back);
    a name of another form sorts as version 0."""
    job, _, version = path.stem.rpartition("-v")
    return (job, int(version)) if version.isdigit() else (path.stem, 0)


def write(folder: Path, record: SearchRecord) -> Path:
    """Write ``record`` to ``folder`` (made if missing) whole or not at all
    (:func:`optimizer_service.files.replace_file`). Returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(record.job_id, record.version)
    replace_file(path, json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
    return path


def read(path: Path) -> SearchRecord:
    """The record in ``path``; :class:`InvalidInputError` with one line when it is
    missing, too large, not JSON or not a record."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise InvalidInputError(f"cannot read search record {path}: {error.strerror}") from None
    if size > MAX_RECORD_BYTES:
        raise InvalidInputError(f"search record {path} is {size} bytes, over the {MAX_RECORD_BYTES} this reads")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InvalidInputError(f"search record {path} is not readable JSON ({error})") from None
    return SearchRecord.from_dict(data, source=f"search record {path}")
