"""Search records: written whole, read back equal, and a bad file refused in one line."""

from __future__ import annotations

import json

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.service import search_record
from optimizer_service.service.search_record import SearchRecord


def record(**changes) -> SearchRecord:
    values = dict(job_id="job/1 x", version=3, cluster="abc~d1", traces=[{"rank": 0, "iterations": []}],
                  topology_yaml="name: t\n", seed=7, running_plan_json=None, evaluations=40_000,
                  prior_fit={"channels": {}}, plan_json='{"ops": []}', outcome={"predicted_seconds": 0.1})
    values.update(changes)
    return SearchRecord(**values)


def test_a_record_is_written_whole_under_a_safe_name_and_read_back_equal(tmp_path):
    written = search_record.write(tmp_path / "new", record())
    assert written.name == "job_1_x-v3.json" and sorted(p.name for p in written.parent.iterdir()) == [written.name]
    assert search_record.read(written) == record()
    again = search_record.write(tmp_path / "new", record(seed=8))          # a second write replaces it
    assert again == written and search_record.read(written).seed == 8
    later = search_record.write(tmp_path / "new", record(version=12))     # read back in version order
    assert sorted([later, written], key=search_record.file_order) == [written, later]


@pytest.mark.parametrize("content, words", [
    ("not json", "is not readable JSON"),
    (json.dumps({"format": "other"}), "is not a search record"),
    (json.dumps({**record().to_dict(), "version": "3"}), "field 'version' is missing or not a int"),
    (json.dumps({**record().to_dict(), "inputs": {**record().to_dict()["inputs"], "traces": []}}),
     "'inputs.traces' must be a non-empty list"),
    (json.dumps({**record().to_dict(), "inputs": {**record().to_dict()["inputs"], "seed": True}}),
     "field 'seed' is missing or not a int"),
])
def test_a_bad_record_is_refused_in_one_line_naming_the_file(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InvalidInputError) as refused:
        search_record.read(path)
    message = str(refused.value)
    assert words in message and str(path) in message and "\n" not in message


def test_a_missing_or_oversized_record_is_refused_before_it_is_read(tmp_path, monkeypatch):
    with pytest.raises(InvalidInputError, match="cannot read search record"):
        search_record.read(tmp_path / "absent.json")
    path = search_record.write(tmp_path, record())
    monkeypatch.setattr(search_record, "MAX_RECORD_BYTES", 10)
    with pytest.raises(InvalidInputError, match="over the 10 this reads"):
        search_record.read(path)
