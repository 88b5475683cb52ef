// The motifs of a plan on a UCC channel, in C++: the twins of enforcer/runtime/ucc_motifs.py
// (read its docstring for each form). UCC has no send/recv, so each motif is one
// collective of the channel's backend — allreduce, reduce and broadcast through
// c10d::Backend, the rest through its p2::VCollectives — issued the same way as
// the Python twin issues it, so C++ and Python ranks can run one motif together.
//
// A float16 reduction runs on a float32 copy, rounded back once (UCC 1.3.0 reduces no float16 on CPU).
// Blocking, on the calling (channel worker) thread, never touching Python.
// `members` are the motif's global ranks in the motif's order; the backend was
// made for the same members sorted, so its ranks are positions in sorted(members).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "motifs.hpp"
#include "p2/v_collectives.hpp"

namespace p2 {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// One motif on this rank (`me`), as enforcer.runtime.ucc_motifs.run: `buffer` is the op's flat buffer, or its input's
// (N, D) blocks for ALL_TO_ALL (`output`: the output's blocks; undefined otherwise).
void run_ucc_motif(MotifKind kind, const at::Tensor& buffer, const at::Tensor& output, const Ranges& ranges,
                   std::pair<int64_t, int64_t> window, const std::vector<int64_t>& members, int64_t me,
                   c10d::Backend& backend, VCollectives& v);

}  // namespace p2
