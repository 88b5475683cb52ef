"""The trace's readers: the Python :class:`~enforcer.trace.Tracer` records and reads, the C++ backend's
:class:`~enforcer.group.native_trace.NativeTracer` only reads (its backend records); both export one format."""

from __future__ import annotations

import pytest
import json
import time

from enforcer.group import native
from enforcer.group.native_trace import NativeTracer
from enforcer.trace import TraceReader, Tracer
from optimizer_service.plan.trace import OpRecord

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


# ------------------------------------------------------------ reads that do not grow with the trace
KINDS = ["python", pytest.param("cpp", marks=pytest.mark.skipif(not native.available(),
                                                                   reason=native.why_unavailable()))]


class Recorder:
    """Records ops, waits and motifs into either trace the way its runtime does."""

    def __init__(self, kind: str, limit: int = 10_000) -> None:
        self.trace = Tracer(0, 2, limit) if kind == "python" else NativeTracer(0, 2, limit)
        self.native = getattr(self.trace, "native", None)
        if self.native is not None:
            self.group = self.native.add_group([0, 1], "0")

    def op(self, nbytes: int):
        if self.native is None:
            record = self.trace.issue("all_reduce", "float32", nbytes, (0, 1), "0")
            self.trace.complete(record)
            return record
        index = self.native.issue("all_reduce", "float32", nbytes, self.group)
        self.native.complete(index)
        return self.trace.iteration_ops(self.trace.iteration, 1_000)[-1]

    def wait(self, order: int) -> None:
        if self.native is None:
            self.trace.wait(order, 0.001 * order)
        else:
            self.native.add_wait(order, 0.001 * order)

    def motif(self, iteration: int, seq: int, order: int) -> None:
        if self.native is None:
            record = OpRecord(iteration, seq, seq, "all_reduce", "float32", 4, (0, 1), "0", 0.0)
            self.trace.motif(record, order, order % 2, 0.0, 0.5 * iteration, 0.002)
        else:
            self.native.add_motif(iteration, seq, order, order % 2, 0.0, 0.5 * iteration, 0.002)


def _record_iterations(recorder: Recorder, iterations: int) -> None:
    """Each iteration: three ops, two waits, four motifs, the last of which finishes among the
    next iteration's (a plan that moves an op across the boundary)."""
    for iteration in range(iterations):
        for seq in range(3):
            recorder.op(100 * (seq + 1))
        recorder.wait(0)
        recorder.wait(1)
        if iteration > 0:
            recorder.motif(iteration - 1, 2, 3)
        for order in range(3):
            recorder.motif(iteration, order, order)
        recorder.trace.step()


def _whole_read_window(trace: TraceReader, iterations: int) -> dict:
    """What ``window`` sent when it converted the whole trace and kept the last iterations."""
    document = trace.to_dict()
    keep = set(range(trace.iteration - iterations, trace.iteration))
    for key, index in (("ops", "iteration"), ("iterations", "index"), ("waits", "iteration"),
                       ("motifs", "iteration"), ("cpu", "iteration")):
        document[key] = [item for item in document[key] if item[index] in keep]
    return document


@pytest.mark.parametrize("kind", KINDS)
def test_a_window_reads_only_its_iterations_and_sends_what_a_whole_read_would(kind):
    recorder = Recorder(kind)
    _record_iterations(recorder, 60)
    window = json.loads(recorder.trace.window(5, 1 << 20))
    assert window == _whole_read_window(recorder.trace, 5)
    assert sorted({op["iteration"] for op in window["ops"]}) == [55, 56, 57, 58, 59]
    assert window["ops"][0]["gap"] is not None        # the op before the window gave the first op its gap
    assert [m["iteration"] for m in window["motifs"]].count(55) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_an_iterations_motifs_include_those_finishing_during_the_next_and_stop_two_back(kind):
    recorder = Recorder(kind)
    _record_iterations(recorder, 6)
    recorder.motif(6, 0, 0)
    recorder.motif(5, 2, 3)     # iteration 5's last motif finishes during 6
    recorder.motif(6, 1, 1)
    motifs, more = recorder.trace.iteration_motifs(5, 10)
    assert [(m.iteration, m.op_seq) for m in motifs] == [(5, 0), (5, 1), (5, 2), (5, 2)] and more == 0
    assert recorder.trace.iteration_motifs(5, 3)[1] == 1
    # An iteration's motifs are read back only as far as the one before it: a motif of
    # iteration 3 recorded now ends the read of iteration 5's, however many came before.
    recorder.motif(3, 0, 0)
    recorder.motif(5, 1, 9)
    motifs, more = recorder.trace.iteration_motifs(5, 10)
    assert [(m.iteration, m.order) for m in motifs] == [(5, 9)] and more == 0


def test_both_traces_read_the_same_windows_and_motifs():
    if not native.available():
        pytest.skip(native.why_unavailable())
    python, cpp = Recorder("python"), Recorder("cpp")
    for recorder in (python, cpp):
        _record_iterations(recorder, 30)
    for iterations in (1, 4, 40):
        documents = [json.loads(r.trace.window(iterations, 1 << 20)) for r in (python, cpp)]
        for document in documents:
            document.pop("started_unix")
            for key in ("ops", "iterations"):
                for item in document[key]:
                    for time_field in ("issued", "completed", "gap", "start", "end"):
                        item.pop(time_field, None)
            document.pop("cpu")
        assert documents[0] == documents[1]
    assert python.trace.iteration_motifs(28, 10) == cpp.trace.iteration_motifs(28, 10)


# ------------------------------------------------------------ idle time between iterations
@pytest.mark.parametrize("kind", KINDS)
def test_idle_time_between_iterations_is_no_compute_and_no_part_of_the_next_iteration(kind):
    from enforcer.link.telemetry import IterationClock
    recorder = Recorder(kind)
    trace = recorder.trace
    recorder.op(100)
    trace.step()
    clock = IterationClock(trace)
    recorder.op(100)
    _spin(0.03)                                 # compute after the iteration's last op (an optimizer step)
    trace.step()
    boundary = clock.capture(1, 0)
    paused = trace.now()
    time.sleep(0.25)                            # the loop paused by its launcher
    trace.idle(paused, trace.now())
    _spin(0.01)
    recorder.op(100)
    trace.step()
    item = clock.capture(2, 0)
    time.sleep(0.25)                            # a pause nobody declared: compute, as before
    recorder.op(100)
    trace.step()
    ops = trace.to_dict()["ops"]
    assert 0.035 <= ops[2]["gap"] < 0.15 and ops[3]["gap"] >= 0.25      # the compute both sides of the pause
    assert 0.005 <= item.duration < 0.1 and item.start >= boundary.start + boundary.duration + 0.25
    cpu = {record["iteration"]: record for record in trace.to_dict()["cpu"]}
    assert cpu[2]["wall"] < 0.1 and cpu[3]["wall"] >= 0.25
    window = json.loads(trace.window(2, 1 << 20))       # the search's window reads the same gaps
    assert [op["gap"] for op in window["ops"]][-2:] == [ops[2]["gap"], ops[3]["gap"]]
    assert 0.25 <= trace.idle_between(0.0, trace.now()) < 0.3
    trace.idle(trace.now(), trace.now() - 1.0)          # an empty or reversed span is no idle
    assert trace.idle_between(paused + 1.0, trace.now() + 1.0) == 0.0


def test_idle_within_counts_only_the_parts_of_spans_between_its_ends():
    from enforcer.trace import _idle_within
    spans = [(1.0, 2.0), (3.0, 3.5), (5.0, 7.0)]
    assert _idle_within(spans, 0.0, 10.0) == pytest.approx(3.5)
    assert _idle_within(spans, 1.5, 6.0) == pytest.approx(0.5 + 0.5 + 1.0)
    assert _idle_within(spans, 2.0, 3.0) == 0.0 and _idle_within([], 0.0, 1.0) == 0.0
    assert _idle_within(spans, 3.2, 3.3, [2.0, 3.5, 7.0]) == pytest.approx(0.1)
