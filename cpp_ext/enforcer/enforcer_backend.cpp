#include "enforcer_backend.hpp"

#include <algorithm>

#include "scaled_work.hpp"
#include "works.hpp"

namespace py = pybind11;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;

namespace p2 {

namespace {

// The dtype as the Python trace names it (str(torch.float32) without "torch.").
const std::string& dtype_name(const at::Tensor* tensor) {
  static const std::string none;
  static std::array<std::string, static_cast<size_t>(at::ScalarType::NumOptions)> names = [] {
    std::array<std::string, static_cast<size_t>(at::ScalarType::NumOptions)> out;
    for (size_t i = 0; i < out.size(); ++i) {
      auto type = static_cast<at::ScalarType>(i);
      std::string name = c10::toString(type);
      for (auto& c : name) c = static_cast<char>(std::tolower(c));
      out[i] = name;
    }
    auto set = [&](at::ScalarType type, const char* name) { out[static_cast<size_t>(type)] = name; };
    set(at::kFloat, "float32"); set(at::kDouble, "float64"); set(at::kHalf, "float16"); set(at::kBFloat16, "bfloat16");
    set(at::kLong, "int64"); set(at::kInt, "int32"); set(at::kShort, "int16"); set(at::kChar, "int8");
    set(at::kByte, "uint8"); set(at::kBool, "bool"); set(at::kComplexFloat, "complex64");
    set(at::kComplexDouble, "complex128"); set(at::kComplexHalf, "complex32");
    return out;
  }();
  if (tensor == nullptr || !tensor->defined()) return none;
  return names[static_cast<size_t>(tensor->scalar_type())];
}

int64_t nbytes(const at::Tensor& tensor) { return static_cast<int64_t>(tensor.numel()) * tensor.element_size(); }

int64_t nbytes(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += nbytes(t);
  return total;
}

int64_t nbytes(const std::vector<std::vector<at::Tensor>>& lists) {
  int64_t total = 0;
  for (const auto& list : lists) total += nbytes(list);
  return total;
}

// No split sizes, or all equal (the functional all_to_all_single names them): only even all-to-alls are planned.
bool even_splits(const std::vector<int64_t>& splits, const at::Tensor& tensor, int size) {
  if (splits.empty()) return true;
  if (static_cast<int>(splits.size()) != size || tensor.dim() == 0) return false;
  return std::all_of(splits.begin(), splits.end(), [&](int64_t s) { return s * size == tensor.size(0); });
}

const at::Tensor* first(const std::vector<at::Tensor>& tensors) { return tensors.empty() ? nullptr : &tensors[0]; }

// `call(opts)` on the inner backend, or, where it lacks opts.reduceOp (PREMUL_SUM on gloo),
// `call` with SUM and `outputs` scaled once it completes (scaled_work.hpp).
template <typename Options, typename Call>
WorkPtr reduced(const Options& opts, bool lacks, const at::Tensor* sample, std::vector<at::Tensor> outputs,
                Call&& call) {
  Scaling scaling = Scaling::of(opts.reduceOp, lacks, sample);
  if (!scaling.needed) return call(opts);
  Options sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return c10::make_intrusive<ScaledWork>(call(sum), std::move(outputs), std::move(scaling));
}

// No arguments for the plan runtime: it only counts the op.
struct NoArgs {
  OpArgs operator()() const { return OpArgs(); }
};

OpArgs tensors_args(const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op, int64_t root = 0) {
  OpArgs args;
  args.tensors = tensors;
  args.reduce_op = op;
  args.root = root;
  return args;
}

OpArgs pair_args(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op) {
  OpArgs args;
  args.output = output;
  args.input = input;
  args.reduce_op = op;
  return args;
}

}  // namespace

EnforcerBackend::EnforcerBackend(int rank, int size, std::shared_ptr<OpTrace> trace, int32_t group,
                                 std::map<std::string, Inner> inner)
    : Backend(rank, size), trace_(std::move(trace)), group_(group), inner_(std::move(inner)) {
  TORCH_CHECK(!inner_.empty(), "p2enforcer: no inner backend given");
  if (auto it = inner_.find("cpu"); it != inner_.end()) {
    cpu_ = it->second.get();
    cpu_is_gloo_ = cpu_->getBackendName() == "gloo";
  }
  if (auto it = inner_.find("cuda"); it != inner_.end()) cuda_ = it->second.get();
}

EnforcerBackend::~EnforcerBackend() {
  if (!Py_IsInitialized()) {            // at interpreter exit: leak the Python reference rather than crash
    on_close_.release();
    return;
  }
  py::gil_scoped_acquire gil;
  on_close_ = py::object();
}

void EnforcerBackend::set_plan(std::shared_ptr<PlanRuntime> plan) {
  bool on = plan != nullptr;
  plan_.store(std::move(plan));
  planned_.store(on, std::memory_order_release);
}

void EnforcerBackend::set_on_close(py::object on_close) { on_close_ = std::move(on_close); }

EnforcerBackend::Inner EnforcerBackend::inner(const std::string& device) const {
  auto it = inner_.find(device);
  TORCH_CHECK(it != inner_.end(), "p2enforcer has no inner backend for ", device);
  return it->second;
}

c10d::Backend& EnforcerBackend::inner_for(const at::Tensor* tensor) {
  if (cpu_ != nullptr && (tensor == nullptr || tensor->is_cpu())) return *cpu_;
  if (tensor != nullptr && tensor->is_cuda() && cuda_ != nullptr) return *cuda_;
  std::string device = tensor == nullptr ? inner_.begin()->first : c10::DeviceTypeName(tensor->device().type(), true);
  auto it = inner_.find(device);
  TORCH_CHECK(it != inner_.end(), "p2enforcer has no inner backend for ", device,
              " tensors; set P2_INNER_BACKEND (e.g. cpu:gloo,", device, ":gloo)");
  return *it->second;
}

WorkPtr EnforcerBackend::track(WorkPtr work, int64_t index, bool futureless) {
  if (futureless) return c10::make_intrusive<TrackedWork>(std::move(work), trace_, index);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = work->getFuture();
  } catch (const std::exception&) {
    return c10::make_intrusive<TrackedWork>(std::move(work), trace_, index);   // another backend without a future
  }
  std::weak_ptr<OpTrace> trace = trace_;
  future->addCallback([trace, index](c10::ivalue::Future&) {
    if (auto alive = trace.lock()) alive->complete(index);
  });
  return work;
}

template <typename Run, typename Args>
WorkPtr EnforcerBackend::op(OpKind kind, const at::Tensor* tensor, int64_t bytes, int32_t root, Run&& run,
                            Args&& planned, bool plannable) {
  OpEntry entry = trace_->issue(kind, dtype_name(tensor), bytes, group_, root);
  if (planned_.load(std::memory_order_acquire) && (plannable || is_comm_kind(kind))) {
    if (auto plan = plan_.load()) {     // every collective is shown to it: it counts them
      if (plannable) {
        OpArgs args = planned();
        if (auto work = plan->submit(kind, entry, &args)) return work;
      } else if (auto work = plan->submit(kind, entry, nullptr)) {
        return work;
      }
    }
  }
  c10d::Backend& inner = inner_for(tensor);
  return track(run(inner), entry.index, (kind == OpKind::Send || kind == OpKind::Recv) && is_gloo(inner));
}

// ------------------------------------------------------------------ plumbing
bool EnforcerBackend::supportsCoalescing() const { return cpu_ != nullptr && cpu_->supportsCoalescing(); }
void EnforcerBackend::startCoalescing() { inner_for(nullptr).startCoalescing(); }
WorkPtr EnforcerBackend::endCoalescing() { return inner_for(nullptr).endCoalescing(); }

void EnforcerBackend::setTimeout(std::chrono::milliseconds timeout) {
  for (auto& [device, backend] : inner_) backend->setTimeout(timeout);
}

void EnforcerBackend::setSequenceNumberForGroup() { inner_for(nullptr).setSequenceNumberForGroup(); }
uint64_t EnforcerBackend::getSequenceNumberForGroup() { return inner_for(nullptr).getSequenceNumberForGroup(); }

// ---------------------------------------------------------------- all-reduce
WorkPtr EnforcerBackend::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor* sample = first(tensors);
  return op(
      OpKind::AllReduce, sample, nbytes(tensors), 0,
      [&](c10d::Backend& b) {
        return reduced(opts, is_gloo(b), sample, tensors, [&](const auto& o) { return b.allreduce(tensors, o); });
      },
      [&] { return tensors_args(tensors, opts.reduceOp); }, true);
}

WorkPtr EnforcerBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                             const c10d::AllreduceCoalescedOptions& opts) {
  const at::Tensor* sample = first(tensors);
  return op(
      OpKind::AllReduceCoalesced, sample, nbytes(tensors), 0,
      [&](c10d::Backend& b) {
        return reduced(opts, is_gloo(b), sample, tensors,
                       [&](const auto& o) { return b.allreduce_coalesced(tensors, o); });
      },
      NoArgs(), false);
}

// ------------------------------------------------------------------ rooted
WorkPtr EnforcerBackend::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  return op(
      OpKind::Broadcast, first(tensors), nbytes(tensors), static_cast<int32_t>(opts.rootRank),
      [&](c10d::Backend& b) { return b.broadcast(tensors, opts); },
      [&] { return tensors_args(tensors, c10d::ReduceOp(c10d::ReduceOp::SUM), opts.rootRank); }, true);
}

WorkPtr EnforcerBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor* sample = first(tensors);
  return op(
      OpKind::Reduce, sample, nbytes(tensors), static_cast<int32_t>(opts.rootRank),
      [&](c10d::Backend& b) {
        std::vector<at::Tensor> outputs;
        if (getRank() == opts.rootRank) outputs = tensors;    // only the root's result is defined
        return reduced(opts, is_gloo(b), sample, std::move(outputs),
                       [&](const auto& o) { return b.reduce(tensors, o); });
      },
      NoArgs(), false);
}

WorkPtr EnforcerBackend::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                const c10d::GatherOptions& opts) {
  return op(
      OpKind::Gather, first(inputs), nbytes(inputs) * getSize(), static_cast<int32_t>(opts.rootRank),
      [&](c10d::Backend& b) { return b.gather(outputs, inputs, opts); }, NoArgs(), false);
}

WorkPtr EnforcerBackend::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                 const c10d::ScatterOptions& opts) {
  return op(
      OpKind::Scatter, first(outputs), nbytes(outputs) * getSize(), static_cast<int32_t>(opts.rootRank),
      [&](c10d::Backend& b) { return b.scatter(outputs, inputs, opts); }, NoArgs(), false);
}

// ------------------------------------------------------------------ gathers
WorkPtr EnforcerBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                   const c10d::AllgatherOptions& opts) {
  return op(
      OpKind::AllGather, first(inputs), nbytes(outputs), 0,
      [&](c10d::Backend& b) { return b.allgather(outputs, inputs, opts); }, NoArgs(), false);
}

WorkPtr EnforcerBackend::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return op(
      OpKind::AllGatherIntoTensor, &input, nbytes(output), 0,
      [&](c10d::Backend& b) { return b._allgather_base(output, input, opts); },
      [&] { return pair_args(output, input, c10d::ReduceOp(c10d::ReduceOp::SUM)); }, true);
}

WorkPtr EnforcerBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return op(
      OpKind::AllGatherCoalesced, first(inputs), nbytes(outputs), 0,
      [&](c10d::Backend& b) { return b.allgather_coalesced(outputs, inputs, opts); }, NoArgs(), false);
}

WorkPtr EnforcerBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  // One pair is all_gather_into_tensor (functional collectives and DTensor send single ops this way): so a plan can take it.
  if (outputs.size() == 1 && inputs.size() == 1) return _allgather_base(outputs[0], inputs[0], opts);
  return op(
      OpKind::AllGatherIntoTensorCoalesced, first(inputs), nbytes(outputs), 0,
      [&](c10d::Backend& b) { return b.allgather_into_tensor_coalesced(outputs, inputs, opts); }, NoArgs(), false);
}

// ----------------------------------------------------------- reduce-scatters
WorkPtr EnforcerBackend::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                        const c10d::ReduceScatterOptions& opts) {
  const at::Tensor* sample = first(outputs);
  return op(
      OpKind::ReduceScatter, sample, nbytes(inputs), 0,
      [&](c10d::Backend& b) {
        return reduced(opts, is_gloo(b), sample, outputs,
                       [&](const auto& o) { return b.reduce_scatter(outputs, inputs, o); });
      },
      NoArgs(), false);
}

WorkPtr EnforcerBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                              const c10d::ReduceScatterOptions& opts) {
  return op(
      OpKind::ReduceScatterTensor, &input, nbytes(input), 0,
      [&](c10d::Backend& b) {
        return reduced(opts, is_gloo(b), &input, {output},
                       [&](const auto& o) { return b._reduce_scatter_base(output, input, o); });
      },
      [&] { return pair_args(output, input, opts.reduceOp); }, true);
}

WorkPtr EnforcerBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() == 1 && inputs.size() == 1) return _reduce_scatter_base(outputs[0], inputs[0], opts);   // as above
  const at::Tensor* sample = first(inputs);
  return op(
      OpKind::ReduceScatterTensorCoalesced, sample, nbytes(inputs), 0,
      [&](c10d::Backend& b) {
        return reduced(opts, is_gloo(b), sample, outputs,
                       [&](const auto& o) { return b.reduce_scatter_tensor_coalesced(outputs, inputs, o); });
      },
      NoArgs(), false);
}

// --------------------------------------------------------------- all-to-all
WorkPtr EnforcerBackend::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                       std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  bool even = even_splits(output_splits, output, getSize()) && even_splits(input_splits, input, getSize());
  return op(
      OpKind::AllToAllSingle, &input, nbytes(input), 0,
      [&](c10d::Backend& b) { return b.alltoall_base(output, input, output_splits, input_splits, opts); },
      [&] { return pair_args(output, input, c10d::ReduceOp(c10d::ReduceOp::SUM)); }, even);
}

WorkPtr EnforcerBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllToAllOptions& opts) {
  return op(
      OpKind::AllToAll, first(inputs), nbytes(inputs), 0,
      [&](c10d::Backend& b) { return b.alltoall(outputs, inputs, opts); }, NoArgs(), false);
}

// ----------------------------------------------------------------- barriers
WorkPtr EnforcerBackend::barrier(const c10d::BarrierOptions& opts) {
  return op(
      OpKind::Barrier, nullptr, 0, 0, [&](c10d::Backend& b) { return b.barrier(opts); }, NoArgs(), false);
}

void EnforcerBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  OpEntry entry = trace_->issue(OpKind::MonitoredBarrier, dtype_name(nullptr), 0, group_, 0);
  inner_for(nullptr).monitoredBarrier(opts, wait_all_ranks);
  trace_->complete(entry.index);
}

// ----------------------------------------------------------- point-to-point
WorkPtr EnforcerBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return op(
      OpKind::Send, first(tensors), nbytes(tensors), 0, [&](c10d::Backend& b) { return b.send(tensors, dst, tag); },
      NoArgs(), false);
}

WorkPtr EnforcerBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return op(
      OpKind::Recv, first(tensors), nbytes(tensors), 0, [&](c10d::Backend& b) { return b.recv(tensors, src, tag); },
      NoArgs(), false);
}

WorkPtr EnforcerBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return op(
      OpKind::Recv, first(tensors), nbytes(tensors), 0,
      [&](c10d::Backend& b) { return b.recvAnysource(tensors, tag); }, NoArgs(), false);
}

// ---------------------------------------------------------------- lifecycle
void EnforcerBackend::close(bool abort) {
  if (closed_.exchange(true)) return;
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    if (on_close_ && !on_close_.is_none()) {
      try {
        on_close_(abort);
      } catch (py::error_already_set& error) {
        error.discard_as_unraisable("p2enforcer: closing the Python side of a group");
      }
    }
    on_close_ = py::none();
  }
  set_plan(nullptr);
  for (auto& [device, backend] : inner_) {
    if (abort) {
      backend->abort();
    } else {
      backend->shutdown();
    }
  }
}

void EnforcerBackend::abort() { close(true); }
void EnforcerBackend::shutdown() { close(false); }

}  // namespace p2
