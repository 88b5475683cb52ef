// The Python module enforcer._ucc: UCC's C API as small RAII objects
// (Lib, Context, Team, Request), and UccBackend, a torch.distributed Backend.
//
// Blocking calls release the GIL. Stores are torch.distributed.Store objects
// (TCPStore, PrefixStore, ...); every OOB exchange of one Context or Team uses
// keys under its own `name` in that store, one fresh sub-prefix per round.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ucc_backend.hpp"
#include "ucc_collective.hpp"
#include "ucc_error.hpp"
#include "ucc_request.hpp"
#include "ucc_types.hpp"

namespace py = pybind11;
using namespace p2ucc;

namespace {

using Millis = std::chrono::milliseconds;

std::shared_ptr<Context> make_context(std::shared_ptr<Lib> lib, const c10::intrusive_ptr<c10d::Store>& store,
                                      int rank, int size, Millis timeout, const std::string& name,
                                      const std::string& net_devices, const std::string& transports) {
  std::shared_ptr<StoreOob> oob;
  if (store) oob = std::make_shared<StoreOob>(store, name, rank, size, timeout);
  return std::make_shared<Context>(std::move(lib), std::move(oob), ContextOptions{net_devices, transports});
}

std::shared_ptr<Team> make_team(std::shared_ptr<Context> context, const c10::intrusive_ptr<c10d::Store>& store,
                                int rank, int size, Millis timeout, const std::string& name) {
  auto oob = std::make_shared<StoreOob>(store, name, rank, size, timeout);
  return std::make_shared<Team>(std::move(context), std::move(oob), rank, size, timeout);
}

// Progresses the request's context and tests it; raises on failure.
bool request_test(Request& request) {
  request.team()->context()->progress();
  ucc_status_t status = request.test();
  if (status == UCC_INPROGRESS) return false;
  check(status, ("ucc " + request.name()).c_str());
  return true;
}

std::unique_ptr<Request> request(std::shared_ptr<Team> team, Collective collective, double timeout) {
  return std::make_unique<Request>(std::move(team), std::move(collective), timeout);
}

// One OOB all-gather round driven to completion: what UCC does with a StoreOob, from Python.
std::vector<std::string> oob_allgather(StoreOob& oob, const std::string& data) {
  ucc_oob_coll_t coll = oob.coll();
  std::string gathered(data.size() * coll.n_oob_eps, '\0');
  void* round = nullptr;
  ucc_status_t status = coll.allgather(const_cast<char*>(data.data()), gathered.data(), data.size(),
                                       coll.coll_info, &round);
  if (status == UCC_OK) {
    while ((status = coll.req_test(round)) == UCC_INPROGRESS) {
    }
    coll.req_free(round);
  }
  if (status != UCC_OK) fail(describe("out-of-band all-gather", status) + ": " + oob.last_error());
  std::vector<std::string> parts;
  for (uint32_t r = 0; r < coll.n_oob_eps; ++r) parts.push_back(gathered.substr(r * data.size(), data.size()));
  return parts;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "pybind11 bindings to UCC's C API and a UCC torch.distributed backend for CPU tensors";
  py::module_::import("torch.distributed");   // registers Store, Backend, Work, ReduceOp

  m.def("version", &Lib::version, "UCC's version string");

  py::class_<Lib, std::shared_ptr<Lib>>(m, "Lib", "ucc_init / ucc_finalize (thread mode FUNNELED)")
      .def(py::init<>())
      .def_property_readonly("env_prefix", &Lib::env_prefix);

  py::class_<StoreOob, std::shared_ptr<StoreOob>>(
      m, "StoreAllgather",
      "UCC's out-of-band all-gather over a Store (what Context and Team use): keys <name>/<round>/<rank>")
      .def(py::init<c10::intrusive_ptr<c10d::Store>, std::string, int, int, Millis>(), py::arg("store"),
           py::arg("name"), py::arg("rank"), py::arg("size"), py::arg("timeout") = Millis(300000))
      .def("allgather",
           [](StoreOob& oob, const py::bytes& data) {
             std::string bytes = data;
             std::vector<std::string> parts;
             {
               py::gil_scoped_release release;
               parts = oob_allgather(oob, bytes);
             }
             py::list out;
             for (const auto& part : parts) out.append(py::bytes(part));
             return out;
           },
           "every member's bytes (all the same length), in member order")
      .def_property_readonly("rounds", &StoreOob::rounds);

  py::class_<Context, std::shared_ptr<Context>>(
      m, "Context",
      "A UCC context. With a store: created collectively by `size` members (OOB all-gather under `name`); "
      "store=None makes a local context. net_devices/transports: UCX NET_DEVICES/TLS for this context only.")
      .def(py::init(&make_context), py::arg("lib"), py::arg("store") = nullptr, py::arg("rank") = 0,
           py::arg("size") = 1, py::arg("timeout") = Millis(300000), py::arg("name") = "ctx",
           py::arg("net_devices") = "", py::arg("transports") = "", py::call_guard<py::gil_scoped_release>())
      .def("progress", [](Context& context) { return static_cast<int>(context.progress()); },
           py::call_guard<py::gil_scoped_release>());

  py::class_<Team, std::shared_ptr<Team>>(m, "Team",
                                          "A UCC team of `size` members; the constructor posts its creation")
      .def(py::init(&make_team), py::arg("context"), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout") = Millis(300000), py::arg("name") = "team", py::call_guard<py::gil_scoped_release>())
      .def("test", &Team::test, "progress once; True when the team is ready", py::call_guard<py::gil_scoped_release>())
      .def("wait", &Team::wait, "until ready (raises after the timeout)", py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &Team::rank)
      .def_property_readonly("size", &Team::size);

  py::class_<Request>(m, "Request", "one initialised collective: post(), then test() until True (or wait())")
      .def("post", &Request::post, py::call_guard<py::gil_scoped_release>())
      .def("test", &request_test, py::call_guard<py::gil_scoped_release>())
      .def("wait",
           [](Request& r) {
             while (!request_test(r)) {
             }
           },
           py::call_guard<py::gil_scoped_release>())
      .def("finalize", &Request::finalize, "release the request now (also done when it is dropped)",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("name", &Request::name);

  // Collective requests on CPU tensors (initialised, not posted); timeout in seconds, 0 = none.
  m.def("allreduce",
        [](std::shared_ptr<Team> team, at::Tensor tensor, const c10d::ReduceOp& op, double timeout) {
          auto reduction = reduction_for(op, tensor.scalar_type(), "allreduce");
          return request(team, allreduce(tensor, reduction, team->size()), timeout);
        },
        py::arg("team"), py::arg("tensor"), py::arg("op"), py::arg("timeout") = 0.0);
  m.def("broadcast",
        [](std::shared_ptr<Team> team, at::Tensor tensor, int root, double timeout) {
          return request(team, broadcast(tensor, root), timeout);
        },
        py::arg("team"), py::arg("tensor"), py::arg("root"), py::arg("timeout") = 0.0);
  m.def("allgather",
        [](std::shared_ptr<Team> team, at::Tensor input, at::Tensor output, double timeout) {
          return request(team, allgather(input, output, team->size()), timeout);
        },
        py::arg("team"), py::arg("input"), py::arg("output"), py::arg("timeout") = 0.0);
  m.def("reduce_scatter",
        [](std::shared_ptr<Team> team, at::Tensor input, at::Tensor output, const c10d::ReduceOp& op,
           double timeout) {
          auto reduction = reduction_for(op, output.scalar_type(), "reduce_scatter");
          return request(team, reduce_scatter(input, output, reduction, team->size()), timeout);
        },
        py::arg("team"), py::arg("input"), py::arg("output"), py::arg("op"), py::arg("timeout") = 0.0);
  m.def("alltoall",
        [](std::shared_ptr<Team> team, at::Tensor input, at::Tensor output, double timeout) {
          return request(team, alltoall(input, output, team->size()), timeout);
        },
        py::arg("team"), py::arg("input"), py::arg("output"), py::arg("timeout") = 0.0);
  m.def("barrier", [](std::shared_ptr<Team> team, double timeout) { return request(team, barrier(), timeout); },
        py::arg("team"), py::arg("timeout") = 0.0);

  py::class_<UccBackend, c10d::Backend, c10::intrusive_ptr<UccBackend>>(
      m, "UccBackend", "torch.distributed Backend on UCC for CPU tensors (getBackendName() == 'ucc')")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, Millis timeout,
                       const std::string& net_devices, const std::string& transports) {
             return c10::make_intrusive<UccBackend>(store, rank, size, timeout,
                                                    ContextOptions{net_devices, transports});
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("net_devices") = "",
           py::arg("transports") = "", py::call_guard<py::gil_scoped_release>())
      .def("allgatherv_in_place", &UccBackend::allgatherv_in_place, py::arg("buffer"), py::arg("counts"),
           py::arg("displacements"), py::call_guard<py::gil_scoped_release>())
      .def("reduce_scatterv", &UccBackend::reduce_scatterv, py::arg("input"), py::arg("output"), py::arg("counts"),
           py::arg("op"), py::call_guard<py::gil_scoped_release>())
      .def("alltoallv", &UccBackend::alltoallv, py::arg("input"), py::arg("output"), py::arg("send_counts"),
           py::arg("send_displacements"), py::arg("recv_counts"), py::arg("recv_displacements"),
           py::call_guard<py::gil_scoped_release>())
      .def("v_collectives",
           [](UccBackend& backend) {
             return py::capsule(static_cast<p2::VCollectives*>(&backend), p2::kVCollectivesCapsule);
           },
           "this backend's v-collectives for enforcer._native's plan runtime (a capsule; valid while the backend is)")
      .def_property_readonly("broken", &UccBackend::broken, "'' while usable, else the first failure")
      .def_property_readonly("collectives", &UccBackend::collectives, "collectives handed to UCC so far");
}
