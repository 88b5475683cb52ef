// UccBackend: a c10d::Backend for CPU tensors on UCC, the enforcer's "ucc"
// inner backend (torch's CPU wheel is built without ProcessGroupUCC).
//
// Construction is collective over the store's members: one UCC library,
// one context (addresses all-gathered over the store, key prefix "ctx") and one
// team of all members (key prefix "team"), all made, used and destroyed on the
// backend's ProgressEngine thread. Each op checks its arguments on the calling
// thread (one line per mistake, before anything is posted), copies what
// needs a contiguous layout, and queues one UCC collective; the returned Work
// (and its future) completes on the progress thread.
//
// Ops: allreduce (SUM, PRODUCT, MIN, MAX, BAND/BOR/BXOR on integers, AVG,
// PREMUL_SUM), allreduce_coalesced, broadcast, reduce, allgather,
// _allgather_base, reduce_scatter, _reduce_scatter_base, alltoall_base (equal
// or split sizes), alltoall, barrier, monitoredBarrier (a barrier with the
// timeout), gather, scatter; and, beyond c10d, the v-variants the enforcer's
// plan motifs need (allgatherv_in_place, reduce_scatterv, alltoallv: p2::VCollectives,
// which the enforcer's C++ plan runtime calls directly).
// send/recv: UCC has no point-to-point API; they raise one line.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "p2/v_collectives.hpp"
#include "progress_engine.hpp"
#include "store_oob.hpp"
#include "ucc_context.hpp"
#include "ucc_lib.hpp"
#include "ucc_team.hpp"

namespace p2ucc {

class UccBackend : public c10d::Backend, public p2::VCollectives {
 public:
  UccBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
             ContextOptions options);
  ~UccBackend() override;

  const std::string getBackendName() const override { return "ucc"; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // The v-variants (p2::VCollectives: counts and displacements in elements, one per member).
  c10::intrusive_ptr<c10d::Work> allgatherv_in_place(const at::Tensor& buffer, std::vector<uint64_t> counts,
                                                     std::vector<uint64_t> displacements) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatterv(const at::Tensor& input, const at::Tensor& output,
                                                 std::vector<uint64_t> counts, const c10d::ReduceOp& op) override;
  c10::intrusive_ptr<c10d::Work> alltoallv(const at::Tensor& input, const at::Tensor& output,
                                           std::vector<uint64_t> send_counts, std::vector<uint64_t> send_displacements,
                                           std::vector<uint64_t> recv_counts,
                                           std::vector<uint64_t> recv_displacements) override;

  void shutdown() override;
  void abort() override;

  // "" while usable, else the first failure.
  std::string broken() const { return engine_ ? engine_->broken() : "shut down"; }
  // Collectives handed to UCC so far (tests tell a UCC channel from a gloo one by it).
  uint64_t collectives() const { return collectives_.load(); }

 private:
  c10::intrusive_ptr<c10d::Work> run(Collective collective, c10d::OpType type, std::vector<at::Tensor> outputs,
                                     std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout_of(std::chrono::milliseconds op_timeout) const;
  void release(bool abandon_peers);

  std::chrono::milliseconds timeout_;
  std::unique_ptr<ProgressEngine> engine_;
  std::shared_ptr<StoreOob> context_oob_;
  std::shared_ptr<StoreOob> team_oob_;
  std::shared_ptr<Team> team_;      // holds the context, which holds the library
  std::atomic<uint64_t> collectives_{0};
};

}  // namespace p2ucc
