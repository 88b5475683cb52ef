// The pybind11 module enforcer._native: the C++ p2enforcer backend and its trace.
// enforcer/group/native.py is its only caller.
#include <algorithm>
#include <optional>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "enforcer_backend.hpp"
#include "motifs.hpp"
#include "op_buffer.hpp"
#include "op_trace.hpp"
#include "plan_runtime.hpp"
#include "ucc_motifs.hpp"

namespace py = pybind11;

namespace {

py::tuple entry_tuple(const p2::OpEntry& e) {
  py::object completed = e.completed < 0 ? py::none() : py::cast(e.completed);
  return py::make_tuple(e.index, e.iteration, e.seq, e.group_seq, p2::kOpKindNames[static_cast<size_t>(e.kind)],
                        e.dtype, e.bytes, e.group, e.issued, completed, e.enforced, e.root);
}

p2::MotifKind motif_kind(const std::string& name) {
  static const std::map<std::string, p2::MotifKind> kinds = {
      {"AllReduce", p2::MotifKind::AllReduce}, {"ReduceScatter", p2::MotifKind::ReduceScatter},
      {"AllGather", p2::MotifKind::AllGather}, {"Reduce", p2::MotifKind::Reduce},
      {"Broadcast", p2::MotifKind::Broadcast}, {"AllToAll", p2::MotifKind::AllToAll}};
  auto found = kinds.find(name);
  if (found == kinds.end()) throw py::value_error("unknown motif kind " + name);
  return found->second;
}

std::vector<p2::OpSpec> op_specs(const py::list& ops) {
  std::vector<p2::OpSpec> specs;
  for (const auto& item : ops) {
    auto op = item.cast<py::tuple>();
    p2::OpSpec spec;
    spec.seq = op[0].cast<int64_t>();
    spec.kind = op[1].cast<std::string>();
    spec.nbytes = op[2].cast<int64_t>();
    spec.dtype = op[3].cast<std::string>();
    spec.root = op[4].cast<int64_t>();
    spec.group = op[5].cast<std::vector<int64_t>>();
    for (const auto& motif_item : op[6].cast<py::list>()) {
      auto motif = motif_item.cast<py::tuple>();
      spec.motifs.push_back(p2::MotifSpec{motif_kind(motif[0].cast<std::string>()), motif[1].cast<int64_t>(),
                                          motif[2].cast<std::vector<int64_t>>(),
                                          motif[3].cast<std::vector<std::pair<int64_t, int64_t>>>(),
                                          motif[4].cast<std::pair<int64_t, int64_t>>()});
    }
    spec.dependencies = op[7].cast<std::vector<std::vector<int>>>();
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The v-collectives a UCC backend hands over (enforcer._ucc's UccBackend.v_collectives(): a capsule); valid while
// the backend is alive.
p2::VCollectives* v_collectives_of(py::handle backend, const std::string& what) {
  py::object capsule = py::hasattr(backend, "v_collectives") ? backend.attr("v_collectives")() : py::none();
  if (!PyCapsule_IsValid(capsule.ptr(), p2::kVCollectivesCapsule))
    throw py::value_error(what + " (" + py::str(py::type::of(backend)).cast<std::string>() +
                          ") has no v-collectives: a UCC channel needs enforcer._ucc's UccBackend");
  return static_cast<p2::VCollectives*>(PyCapsule_GetPointer(capsule.ptr(), p2::kVCollectivesCapsule));
}

// {(channel, members): backend} as the runtime's channel backends; those of `v_channels` (UCC) must hand over
// their v-collectives (enforcer._ucc's UccBackend.v_collectives(): a capsule).
std::map<p2::ChannelKey, p2::ChannelBackend> channel_backends(const py::dict& comms,
                                                              const std::vector<int64_t>& v_channels) {
  std::map<p2::ChannelKey, p2::ChannelBackend> out;
  for (const auto& [key, backend] : comms) {
    auto pair = key.cast<py::tuple>();
    int64_t channel = pair[0].cast<int64_t>();
    p2::ChannelBackend entry{backend.cast<c10::intrusive_ptr<c10d::Backend>>()};
    if (std::find(v_channels.begin(), v_channels.end(), channel) != v_channels.end())
      entry.v_collectives = v_collectives_of(backend, "channel " + std::to_string(channel) + "'s backend");
    out[{channel, pair[1].cast<std::vector<int64_t>>()}] = std::move(entry);
  }
  return out;
}

py::list entries(const std::vector<p2::OpEntry>& found) {
  py::list out;
  for (const auto& e : found) out.append(entry_tuple(e));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The p2enforcer c10d::Backend in C++ and its trace ring buffer (see enforcer/group/native.py).";
  py::module_::import("torch.distributed");       // registers c10d::Backend with pybind11 first

  py::class_<p2::OpTrace, std::shared_ptr<p2::OpTrace>>(m, "OpTrace")
      .def(py::init<size_t, double>(), py::arg("capacity"), py::arg("started"))
      .def("add_group", &p2::OpTrace::add_group, py::arg("ranks"), py::arg("name"))
      .def("group", &p2::OpTrace::group, py::arg("id"))
      .def("complete", &p2::OpTrace::complete, py::arg("index"))
      .def("set_enforced", &p2::OpTrace::set_enforced, py::arg("index"))
      .def("step", &p2::OpTrace::step)
      .def("now", &p2::OpTrace::now)
      .def_property_readonly("iteration", &p2::OpTrace::iteration)
      .def_property_readonly("steps", &p2::OpTrace::steps)
      .def_property_readonly("issued", &p2::OpTrace::issued)
      .def_property_readonly("dropped", &p2::OpTrace::dropped)
      .def("counts", [](const p2::OpTrace& trace) {
        py::dict out;
        auto counts = trace.counts();
        for (size_t i = 0; i < counts.size(); ++i)
          if (counts[i]) out[py::str(p2::kOpKindNames[i])] = counts[i];
        return out;
      })
      .def("snapshot", [](const p2::OpTrace& trace, std::optional<int64_t> since) {
        return entries(trace.snapshot(since.value_or(p2::kAllIterations)));
      }, py::arg("since") = py::none(),
           "Every kept op of iteration `since` or later (default: all), oldest first, as (index, iteration, seq, "
           "group_seq, kind, dtype, bytes, group id, issued, completed or None, enforced, root)")
      .def("iteration_ops", [](const p2::OpTrace& trace, int64_t iteration, size_t limit) {
        return entries(trace.iteration_ops(iteration, limit));
      }, py::arg("iteration"), py::arg("limit"))
      .def("waits", [](const p2::OpTrace& trace, std::optional<int64_t> since) {
        py::list out;
        for (const auto& w : trace.waits(since.value_or(p2::kAllIterations)))
          out.append(py::make_tuple(w.iteration, w.order, w.seconds));
        return out;
      }, py::arg("since") = py::none(),
         "The plan runtime's waits of iteration `since` or later (default: all), oldest first: "
         "(iteration, order, seconds)")
      .def("motifs", [](const p2::OpTrace& trace, std::optional<int64_t> since) {
        py::list out;
        for (const auto& m : trace.motifs(since.value_or(p2::kAllIterations)))
          out.append(py::make_tuple(m.iteration, m.op_seq, m.order, m.channel, m.waited, m.start, m.seconds));
        return out;
      }, py::arg("since") = py::none(),
         "The motifs of iteration `since` or later (default: all) the channel workers ran, in the order they "
         "finished: (iteration, op_seq, order, channel, waited, start, seconds)")
      .def("issue", [](p2::OpTrace& trace, const std::string& kind, const std::string& dtype, int64_t bytes,
                       int32_t group, int32_t root) {
        for (size_t i = 0; i < p2::kOpKinds; ++i)
          if (kind == p2::kOpKindNames[i])
            return trace.issue(static_cast<p2::OpKind>(i), dtype, bytes, group, root).index;
        throw py::value_error("no op kind named " + kind);
      }, py::arg("kind"), py::arg("dtype"), py::arg("bytes"), py::arg("group"), py::arg("root") = 0,
         "Record an op as the backend does; returns its index (for tests and benchmarks of the readers)")
      .def("add_wait", &p2::OpTrace::add_wait, py::arg("order"), py::arg("seconds"),
           "Record a dispatcher wait in the current iteration, as the plan runtime does")
      .def("add_motif", [](p2::OpTrace& trace, int64_t iteration, int64_t op_seq, int64_t order, int64_t channel,
                           double waited, double start, double seconds) {
        trace.add_motif(p2::MotifEntry{iteration, op_seq, order, channel, waited, start, seconds});
      }, py::arg("iteration"), py::arg("op_seq"), py::arg("order"), py::arg("channel"), py::arg("waited"),
         py::arg("start"), py::arg("seconds"),
         "Record a motif as the plan runtime's channel workers do (for tests and benchmarks of the readers)")
      .def("iteration_motifs", [](const p2::OpTrace& trace, int64_t iteration, size_t limit) {
        auto [motifs, more] = trace.iteration_motifs(iteration, limit);
        py::list out;
        for (const auto& m : motifs)
          out.append(py::make_tuple(m.iteration, m.op_seq, m.order, m.channel, m.waited, m.start, m.seconds));
        return py::make_tuple(out, more);
      }, py::arg("iteration"), py::arg("limit"),
         "The first `limit` motifs of `iteration` as motifs() gives them, and how many more there were; "
         "reads back only to the iteration before it")
      .def_property_readonly("waited", &p2::OpTrace::waited);

  py::class_<p2::PlanRuntime, std::shared_ptr<p2::PlanRuntime>>(m, "PlanRuntime")
      .def(py::init([](py::list ops, std::vector<std::vector<int64_t>> orders, int64_t me, py::dict comms,
                       std::shared_ptr<p2::OpTrace> trace, py::object validate, std::vector<int64_t> ucc_channels) {
             return std::make_shared<p2::PlanRuntime>(op_specs(ops), std::move(orders), me,
                                                      channel_backends(comms, ucc_channels), std::move(trace),
                                                      std::move(validate));
           }),
           py::arg("ops"), py::arg("orders"), py::arg("me"), py::arg("comms"), py::arg("trace"), py::arg("validate"),
           py::arg("ucc_channels") = std::vector<int64_t>(),
           "ops: per planned op (seq, plan kind, bytes, dtype or \"\", root, global ranks, motifs, dependencies), "
           "each motif (kind, channel, ranks, ranges, window); comms: {(channel, members): bare backend}; "
           "validate(op, elements) -> bool; ucc_channels: channels whose backends are UCC (their motifs run through the backends' "
           "v_collectives(), one collective each)")
      .def("start", &p2::PlanRuntime::start)
      .def("step", &p2::PlanRuntime::step, py::call_guard<py::gil_scoped_release>())
      .def("close", &p2::PlanRuntime::close, py::arg("abort") = false, py::call_guard<py::gil_scoped_release>());

  py::class_<p2::EnforcerBackend, c10d::Backend, c10::intrusive_ptr<p2::EnforcerBackend>>(m, "EnforcerBackend")
      .def(py::init([](int rank, int size, std::shared_ptr<p2::OpTrace> trace, int32_t group,
                       std::map<std::string, c10::intrusive_ptr<c10d::Backend>> inner) {
             return c10::make_intrusive<p2::EnforcerBackend>(rank, size, std::move(trace), group, std::move(inner));
           }),
           py::arg("rank"), py::arg("size"), py::arg("trace"), py::arg("group"), py::arg("inner"))
      .def("set_plan", &p2::EnforcerBackend::set_plan, py::arg("plan"))
      .def("set_on_close", &p2::EnforcerBackend::set_on_close, py::arg("on_close"))
      .def("inner", &p2::EnforcerBackend::inner, py::arg("device"))
      .def_property_readonly("group", &p2::EnforcerBackend::group)
      .def_property_readonly("trace", &p2::EnforcerBackend::trace);

  // ---------------------------------------------------------------------------------------------------------------
  // testing: parity bindings of the motifs (motifs.cpp) and the op buffers (op_buffer.cpp) against their Python
  // twins enforcer/comm/sendrecv.py and enforcer/runtime/buffers.py (and ucc_motifs.cpp against enforcer/runtime/ucc_motifs.py); only
  // tests/enforcer/test_native_motifs.py and tests/ucc/test_ucc_native_motifs.py call them. The motifs
  // run on a bare Python dist.Backend made for exactly `members` (this rank at its position), with the GIL released.
  {
    auto testing = m.def_submodule("testing", "Parity bindings of the C++ motifs and op buffers (tests only).");
    using BackendPtr = c10::intrusive_ptr<c10d::Backend>;
    using Members = std::vector<int64_t>;
    using Span = std::pair<int64_t, int64_t>;
    auto released = py::call_guard<py::gil_scoped_release>();
    testing.def("reduce_scatter", [](const std::vector<at::Tensor>& parts, const Members& members, BackendPtr backend,
                                     int64_t rank) { p2::reduce_scatter(parts, members, p2::Peers(backend, members, rank)); },
                py::arg("parts"), py::arg("members"), py::arg("backend"), py::arg("rank"), released);
    testing.def("all_gather", [](const std::vector<at::Tensor>& parts, const Members& members, BackendPtr backend,
                                 int64_t rank) { p2::all_gather(parts, members, p2::Peers(backend, members, rank)); },
                py::arg("parts"), py::arg("members"), py::arg("backend"), py::arg("rank"), released);
    testing.def("reduce", [](const at::Tensor& buffer, const Members& members, BackendPtr backend, int64_t rank,
                             int64_t segment_bytes) {
                  p2::reduce(buffer, members, p2::Peers(backend, members, rank), segment_bytes);
                },
                py::arg("buffer"), py::arg("members"), py::arg("backend"), py::arg("rank"),
                py::arg("segment_bytes") = p2::kChainSegmentBytes, released);
    testing.def("broadcast", [](const at::Tensor& buffer, const Members& members, BackendPtr backend, int64_t rank,
                                int64_t segment_bytes) {
                  p2::broadcast(buffer, members, p2::Peers(backend, members, rank), segment_bytes);
                },
                py::arg("buffer"), py::arg("members"), py::arg("backend"), py::arg("rank"),
                py::arg("segment_bytes") = p2::kChainSegmentBytes, released);
    testing.def("all_to_all", [](const at::Tensor& inputs, const at::Tensor& outputs, Span columns, Span window,
                                 const Members& members, BackendPtr backend, int64_t rank) {
                  p2::all_to_all(inputs, outputs, columns, window, members, p2::Peers(backend, members, rank));
                },
                py::arg("inputs"), py::arg("outputs"), py::arg("columns"), py::arg("window"), py::arg("members"),
                py::arg("backend"), py::arg("rank"), released);
    // ucc_motifs.cpp against enforcer/runtime/ucc_motifs.py: one motif on a UCC backend made for sorted(members).
    testing.def("ucc_motif", [](const std::string& kind, const at::Tensor& buffer, std::optional<at::Tensor> output,
                                const p2::Ranges& ranges, Span window, const Members& members, int64_t rank,
                                py::object backend) {
                  BackendPtr base = backend.cast<BackendPtr>();
                  p2::VCollectives* v = v_collectives_of(backend, "the backend");
                  py::gil_scoped_release released;
                  p2::run_ucc_motif(motif_kind(kind), buffer, output.value_or(at::Tensor()), ranges, window, members,
                                    rank, *base, *v);
                },
                py::arg("kind"), py::arg("buffer"), py::arg("output"), py::arg("ranges"), py::arg("window"),
                py::arg("members"), py::arg("rank"), py::arg("backend"));
    testing.attr("CHAIN_SEGMENT_BYTES") = p2::kChainSegmentBytes;

    py::class_<p2::OpBuffer>(testing, "OpBuffer")
        .def("begin", &p2::OpBuffer::begin)
        .def("finish", &p2::OpBuffer::finish)
        .def_readonly("buffer", &p2::OpBuffer::buffer)          // None until begin()
        .def_readonly("output", &p2::OpBuffer::output)          // None but for all_to_all after begin()
        .def_readonly("result", &p2::OpBuffer::result)
        .def_readonly("elements", &p2::OpBuffer::elements)
        .def_readonly("nbytes", &p2::OpBuffer::nbytes)
        .def_readonly("size", &p2::OpBuffer::size)
        .def_readonly("rank", &p2::OpBuffer::rank);
    testing.def("adopt_buffer", [](const std::string& plan_kind, std::vector<at::Tensor> tensors,
                                   std::optional<at::Tensor> output, std::optional<at::Tensor> input,
                                   const c10d::ReduceOp& reduce_op, int64_t root, int64_t key_root, int64_t size,
                                   int64_t rank) {
                  p2::OpArgs args;
                  args.tensors = std::move(tensors);
                  args.output = output.value_or(at::Tensor());
                  args.input = input.value_or(at::Tensor());
                  args.reduce_op = reduce_op;
                  args.root = root;
                  return p2::OpBuffer::adopt(plan_kind, args, key_root, size, rank);   // None: passes through
                },
                py::arg("plan_kind"), py::arg("tensors"), py::arg("output"), py::arg("input"), py::arg("reduce_op"),
                py::arg("root"), py::arg("key_root"), py::arg("size"), py::arg("rank"));
    // The dispatcher's decision (dispatch.hpp), for the parity test against enforcer.runtime.dispatch.next_step.
    testing.def("next_step", [](std::vector<std::vector<int64_t>> orders, size_t position, std::optional<double> since,
                                std::vector<std::tuple<int, std::vector<bool>, bool>> ops, bool closed, double now) {
                  auto schedule = p2::dispatch::Schedule::of(std::move(orders));
                  p2::dispatch::IterationView view;
                  view.closed = closed;
                  for (const auto& [op, handed, waited] : ops) {
                    int dispatched = static_cast<int>(std::count(handed.begin(), handed.end(), true));
                    view.ops.push_back({op, dispatched, &handed, waited});
                  }
                  auto step = p2::dispatch::next_step(schedule, {position, since}, view, now);
                  return py::make_tuple(step.cursor.position, step.cursor.since, step.hand_over, step.missing,
                                        step.waited, step.blocked, step.finished);
                },
                py::arg("orders"), py::arg("position"), py::arg("since"), py::arg("ops"), py::arg("closed"),
                py::arg("now"),
                "ops: the submitted ops in submission order as (op, handed per motif, waited); returns (position, "
                "since, hand_over, missing, waited, blocked, finished)");
  }
}
