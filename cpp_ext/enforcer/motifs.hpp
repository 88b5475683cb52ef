// The motifs of a plan in C++: bandwidth-optimal collectives over an inner
// backend's send and recv, and an all-to-all window. Twins of enforcer/comm/sendrecv.py
// (same algorithms, same tags, same message order, so a C++ rank and a Python
// rank interoperate and results are bit-identical); see its docstring for
// the algorithms and why gloo's own reduce_scatter is not used.
//
// All calls are blocking and run on the calling (channel worker) thread;
// they never touch Python. Members are global ranks; Peers maps them to the
// positions of the bare backend made for exactly those members.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "p2/v_collectives.hpp"

namespace p2 {

enum class MotifKind : uint8_t { AllReduce, ReduceScatter, AllGather, Reduce, Broadcast, AllToAll };

// Segment size of the pipelined chains (bytes): enforcer.comm.sendrecv.CHAIN_SEGMENT_BYTES.
constexpr int64_t kChainSegmentBytes = int64_t{1} << 20;

// Point-to-point over a bare backend whose ranks are `members`' positions (enforcer.comm.sendrecv.BackendPeers).
// A backend without point-to-point (UCC) comes with its v-collectives instead (ucc_motifs.hpp).
class Peers {
 public:
  Peers(c10::intrusive_ptr<c10d::Backend> backend, std::vector<int64_t> members, int64_t rank,
        VCollectives* v_collectives = nullptr);
  c10::intrusive_ptr<c10d::Work> isend(const at::Tensor& tensor, int64_t peer, int tag) const;
  c10::intrusive_ptr<c10d::Work> irecv(const at::Tensor& tensor, int64_t peer, int tag) const;
  int64_t rank() const { return rank_; }                 // this process's global rank
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  VCollectives* v_collectives() const { return v_collectives_; }   // set for a UCC channel's backend

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<int64_t> members_;
  int64_t rank_;
  VCollectives* v_collectives_;                         // part of backend_, which keeps it alive
};

// enforcer.comm.sendrecv.reduce_scatter: ring; on return parts[i] of member i holds the sum.
void reduce_scatter(const std::vector<at::Tensor>& parts, const std::vector<int64_t>& members, const Peers& peers);
// enforcer.comm.sendrecv.all_gather: ring; fills every parts[j] with member j's parts[j].
void all_gather(const std::vector<at::Tensor>& parts, const std::vector<int64_t>& members, const Peers& peers);
// enforcer.comm.sendrecv.reduce: pipelined chain into members[0].
void reduce(const at::Tensor& buffer, const std::vector<int64_t>& members, const Peers& peers,
            int64_t segment_bytes = kChainSegmentBytes);
// enforcer.comm.sendrecv.broadcast: pipelined chain from members[0].
void broadcast(const at::Tensor& buffer, const std::vector<int64_t>& members, const Peers& peers,
               int64_t segment_bytes = kChainSegmentBytes);
// enforcer.comm.sendrecv.all_to_all: one splined all-to-all motif over (N, D) blocks.
void all_to_all(const at::Tensor& inputs, const at::Tensor& outputs, std::pair<int64_t, int64_t> columns,
                std::pair<int64_t, int64_t> window, const std::vector<int64_t>& members, const Peers& peers);

}  // namespace p2
