// VCollectives: the collectives with per-member counts and displacements that a
// plan's motifs need from a transport without point-to-point (UCC), shared by
// the two extensions. enforcer._ucc's UccBackend implements it; enforcer._native's
// plan runtime calls it (ucc_motifs.hpp) on a UCC channel's backend, without Python.
//
// The two extensions are separate shared objects loaded privately, so the
// runtime never learns the type UccBackend: Python hands it this interface's
// pointer once per channel backend, in a capsule named kVCollectivesCapsule
// (UccBackend.v_collectives()), and keeps the backend alive beside it. Calls go
// through the vtable, which this one header lays out for both.
//
// Counts and displacements are in elements, one per member in team order (the
// backend's ranks); the Works complete as the backend's own do.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace p2 {

inline constexpr const char* kVCollectivesCapsule = "p2.VCollectives";

class VCollectives {
 public:
  // Member j's counts[j] elements at displacements[j] of `buffer` reach every member's buffer there.
  virtual c10::intrusive_ptr<c10d::Work> allgatherv_in_place(const at::Tensor& buffer, std::vector<uint64_t> counts,
                                                             std::vector<uint64_t> displacements) = 0;
  // `input` is the members' parts back to back (counts[j] for member j); `output` (counts[rank]) gets its part's `op`.
  virtual c10::intrusive_ptr<c10d::Work> reduce_scatterv(const at::Tensor& input, const at::Tensor& output,
                                                         std::vector<uint64_t> counts, const c10d::ReduceOp& op) = 0;
  // send_counts[j] elements at send_displacements[j] of `input` go to member j, recv_counts[j] from member j land
  // at recv_displacements[j] of `output`.
  virtual c10::intrusive_ptr<c10d::Work> alltoallv(const at::Tensor& input, const at::Tensor& output,
                                                   std::vector<uint64_t> send_counts,
                                                   std::vector<uint64_t> send_displacements,
                                                   std::vector<uint64_t> recv_counts,
                                                   std::vector<uint64_t> recv_displacements) = 0;

 protected:
  ~VCollectives() = default;      // owned as the backend it is part of, never through this interface
};

}  // namespace p2
