// The pybind11 module enforcer._native: the C++ p2enforcer backend and its trace.
// enforcer/native.py is its only caller.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "enforcer_backend.hpp"
#include "op_trace.hpp"

namespace py = pybind11;

namespace {

py::tuple entry_tuple(const p2::OpEntry& e) {
  py::object completed = e.completed < 0 ? py::none() : py::cast(e.completed);
  return py::make_tuple(e.index, e.iteration, e.seq, e.group_seq, p2::kOpKindNames[static_cast<size_t>(e.kind)],
                        e.dtype, e.bytes, e.group, e.issued, completed, e.enforced, e.root);
}

py::list entries(const std::vector<p2::OpEntry>& found) {
  py::list out;
  for (const auto& e : found) out.append(entry_tuple(e));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The p2enforcer c10d::Backend in C++ and its trace ring buffer (see enforcer/native.py).";
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
      .def("snapshot", [](const p2::OpTrace& trace) { return entries(trace.snapshot()); },
           "Every kept op, oldest first, as (index, iteration, seq, group_seq, kind, dtype, bytes, group id, "
           "issued, completed or None, enforced, root)")
      .def("iteration_ops", [](const p2::OpTrace& trace, int64_t iteration, size_t limit) {
        return entries(trace.iteration_ops(iteration, limit));
      }, py::arg("iteration"), py::arg("limit"));

  py::class_<p2::EnforcerBackend, c10d::Backend, c10::intrusive_ptr<p2::EnforcerBackend>>(m, "EnforcerBackend")
      .def(py::init([](int rank, int size, std::shared_ptr<p2::OpTrace> trace, int32_t group,
                       std::map<std::string, c10::intrusive_ptr<c10d::Backend>> inner) {
             return c10::make_intrusive<p2::EnforcerBackend>(rank, size, std::move(trace), group, std::move(inner));
           }),
           py::arg("rank"), py::arg("size"), py::arg("trace"), py::arg("group"), py::arg("inner"))
      .def("set_planner", &p2::EnforcerBackend::set_planner, py::arg("planner"))
      .def("set_on_close", &p2::EnforcerBackend::set_on_close, py::arg("on_close"))
      .def("inner", &p2::EnforcerBackend::inner, py::arg("device"))
      .def_property_readonly("group", &p2::EnforcerBackend::group)
      .def_property_readonly("trace", &p2::EnforcerBackend::trace);
}
