"""The trace's readers: the Python :class:`~enforcer.trace.Tracer` records and reads, the C++ backend's
:class:`~enforcer.group.native_trace.NativeTracer` only reads (its backend records); both export one format."""

from __future__ import annotations

import pytest
import json
import time

from enforcer.group import native
from enforcer.group.native_trace import NativeTracer
from enforcer.trace import TraceReader, Tracer

RECORDING = ("issue", "complete", "wait", "motif")


def test_only_the_python_trace_takes_op_wait_and_motif_records():
    assert issubclass(Tracer, TraceReader) and issubclass(NativeTracer, TraceReader)
    assert all(callable(getattr(Tracer, name)) for name in RECORDING)
    assert not any(hasattr(NativeTracer, name) for name in RECORDING)
    with pytest.raises(TypeError):
        TraceReader(0, 1)       # the reader is an interface: each trace says how it reads


@pytest.mark.skipif(not native.available(), reason=native.why_unavailable())
def test_both_traces_export_one_format():
    python, cpp = Tracer(1, 2), NativeTracer(1, 2, 100)
    for trace in (python, cpp):
        trace.switched(4, 0)
        trace.bypass("all_reduce")
        assert trace.step() == 1
    documents = [trace.to_dict() for trace in (python, cpp)]
    for document in documents:
        document.pop("started_unix")
        document["switches"][0].pop("at")
    assert documents[0] == documents[1]
    assert documents[0]["bypassed"] == {"all_reduce": 1} and documents[0]["switches"] == [{"iteration": 0,
                                                                                          "version": 4}]
    assert python.iteration_ops(0, 10) == cpp.iteration_ops(0, 10) == []
    assert python.iteration_motifs(0, 10) == cpp.iteration_motifs(0, 10) == ([], 0)
    assert python.waited == cpp.waited == 0.0 and python.wait_seconds() == cpp.wait_seconds() == 0.0


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("kind", ["python", "cpp"])
def test_each_stepped_iteration_records_its_cpu_and_a_window_keeps_its_own(kind):
    if kind == "cpp" and not native.available():
        pytest.skip(native.why_unavailable())
    trace = Tracer(0, 1) if kind == "python" else NativeTracer(0, 1, 100)
    trace.step()                               # the first step only starts the clock
    for _ in range(3):
        _spin(0.02)
        trace.step()
    document = trace.to_dict()
    assert document["host"]["id"] and document["host"]["cores"] >= 1
    assert [c["iteration"] for c in document["cpu"]] == [1, 2, 3]
    for record in document["cpu"]:
        assert record["process_cpu"] >= record["step_thread_cpu"] >= 0.015
        assert record["wall"] >= record["step_thread_cpu"] * 0.9
    if kind == "python":                       # a window keeps the records of the iterations it holds
        record = trace.issue("all_reduce", "float32", 4, (0,), "0")
        trace.complete(record)
        trace.step()
        window = json.loads(trace.window(1, 1 << 20))
        assert [c["iteration"] for c in window["cpu"]] == [4]


def test_a_step_from_another_thread_records_no_cpu_for_that_iteration():
    import threading
    trace = Tracer(0, 1)
    trace.step()
    worker = threading.Thread(target=trace.step)
    worker.start()
    worker.join()
    trace.step()
    assert trace.to_dict()["cpu"] == []        # the thread changed at each lap: no comparable thread CPU
