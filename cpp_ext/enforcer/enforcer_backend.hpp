// The p2enforcer backend in C++: a c10d::Backend that traces every op and passes
// it to the inner backend of the tensor's device (gloo, NCCL, UCC) without
// entering Python, or hands it to the installed plan runtime (plan_runtime.hpp:
// ordering, waits and per-channel issue in C++ too).
//
// torch registers it on the process group for cpu (and cuda) as a CUSTOM
// backend, so every route to a collective — torch.distributed calls, DDP's
// reducer, FSDP2, the c10d dispatcher ops and the functional collectives —
// reaches these virtuals: nothing bypasses it.
//
// Every ReduceOp reaches the inner backend unchanged, except PREMUL_SUM where
// it lacks it (gloo): that runs as SUM and the result is multiplied by the
// factor afterwards (scaled_work.hpp): the value NCCL computes, up to rounding.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "op_trace.hpp"
#include "plan_runtime.hpp"

namespace p2 {

class EnforcerBackend : public c10d::Backend {
 public:
  using Inner = c10::intrusive_ptr<c10d::Backend>;

  EnforcerBackend(int rank, int size, std::shared_ptr<OpTrace> trace, int32_t group, std::map<std::string, Inner> inner);

  ~EnforcerBackend() override;
  const std::string getBackendName() const override { return "p2enforcer"; }

  // Enforce `plan` from the next op on (nullptr: passthrough).
  void set_plan(std::shared_ptr<PlanRuntime> plan);
  // Called (with the GIL) when torch shuts the backend down or aborts it: closes the Python side.
  void set_on_close(pybind11::object on_close);
  Inner inner(const std::string& device) const;
  const std::shared_ptr<OpTrace>& trace() const { return trace_; }
  int32_t group() const { return group_; }

  bool supportsCoalescing() const override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void abort() override;
  void shutdown() override;

 private:
  // The body of every op: trace it, offer it to the plan runtime (with `planned()`'s
  // arguments when `plannable`), else run it on the inner backend.
  template <typename Run, typename Args>
  c10::intrusive_ptr<c10d::Work> op(OpKind kind, const at::Tensor* tensor, int64_t bytes, int32_t root, Run&& run,
                                    Args&& planned, bool plannable);
  c10d::Backend& inner_for(const at::Tensor* tensor);
  bool is_gloo(const c10d::Backend& b) const { return &b == cpu_ && cpu_is_gloo_; }
  // `futureless`: the Work is known to have no future (gloo's send/recv), so no exception is thrown to learn it.
  c10::intrusive_ptr<c10d::Work> track(c10::intrusive_ptr<c10d::Work> work, int64_t index, bool futureless);
  void close(bool abort);

  std::shared_ptr<OpTrace> trace_;
  int32_t group_;
  std::map<std::string, Inner> inner_;
  c10d::Backend* cpu_ = nullptr;
  c10d::Backend* cuda_ = nullptr;
  bool cpu_is_gloo_ = false;      // the CPU inner backend is gloo (no PREMUL_SUM; send/recv Works without a future)
  std::atomic<bool> planned_{false};
  std::atomic<std::shared_ptr<PlanRuntime>> plan_;
  pybind11::object on_close_;
  std::atomic<bool> closed_{false};
};

}  // namespace p2
