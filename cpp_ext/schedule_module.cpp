// optimizer_service.syndicate._schedule_cpp: the pybind11 bindings of the C++ twin of
// optSched (Syndicate Pseudocode 1, §4.3.1) and of Problem.cost_of.
// optimizer_service/syndicate/native_scheduler.py is the only caller; it converts
// a Problem (through Problem._compile) and Graph objects to the plain lists taken here and turns
// InvalidInput into optimizer_service.errors.InvalidInputError. A ProblemGraph
// reuses its buffers from call to call; calls hold the GIL, so one runs at a time.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "list_scheduler.hpp"
#include "problem_graph.hpp"
#include "successor_graph.hpp"

namespace py = pybind11;

namespace {

p2::Policy policy_of(int code) {
    if (code < 0 || code > 2) throw p2::InvalidInput("policy code " + std::to_string(code) + " is not 0, 1 or 2");
    return static_cast<p2::Policy>(code);
}

}  // namespace

PYBIND11_MODULE(_schedule_cpp, m) {
    m.doc() = "C++ twin of optimizer_service.scheduler (Graph.run) and Problem.cost_of; bit-identical results";
    py::register_exception<p2::InvalidInput>(m, "InvalidInput", PyExc_ValueError);

    py::class_<p2::ProblemGraph>(m, "ProblemGraph")
        .def(py::init<const std::vector<int>&, const std::vector<bool>&, const std::vector<double>&,
                      const std::vector<int>&, const std::vector<std::vector<int>>&,
                      const std::vector<std::vector<int>>&, const std::vector<std::vector<p2::TemplateSpec>>&,
                      const std::vector<int>&, int, const std::map<int, double>&, const std::vector<int>&,
                      const std::vector<int>&>(),
             py::arg("order"), py::arg("is_comm"), py::arg("seconds"), py::arg("slot"), py::arg("data_after"),
             py::arg("issue_after"), py::arg("template_sets"), py::arg("slot_set"), py::arg("iterations"),
             py::arg("slowdown") = std::map<int, double>{}, py::arg("streams") = std::vector<int>{},
             py::arg("lanes") = std::vector<int>{})
        .def(
            "cost",
            [](p2::ProblemGraph& self, const std::vector<int>& choice, int policy, bool framework_order,
               int capacity) { return self.cost(choice, policy_of(policy), framework_order, capacity); },
            py::arg("choice"), py::arg("policy"), py::arg("framework_order"), py::arg("capacity") = 1,
            "Iteration time of ``choice`` (policy: 0 critical path, 1 LIFO, 2 FIFO).");

    m.def(
        "run",
        [](const std::vector<int>& channel, const std::vector<std::vector<int>>& successors,
           const std::vector<int>& program, const std::vector<int>& topological, const std::vector<double>& seconds,
           int capacity, int policy, const std::map<int, double>& slowdown) {
            const p2::SuccessorGraph graph(channel, successors, program, topological, seconds, slowdown);
            p2::ListScheduler scheduler;
            scheduler.run(graph, capacity, policy_of(policy));
            return py::make_tuple(scheduler.start, scheduler.end, scheduler.order);
        },
        py::arg("channel"), py::arg("successors"), py::arg("program"), py::arg("topological"), py::arg("seconds"),
        py::arg("capacity"), py::arg("policy"), py::arg("slowdown") = std::map<int, double>{},
        "(start, end, order) of every task, as Graph.run (slowdown: channel -> compute slowdown).");
}
