// How a planned op's tensors become the buffer its motifs address: the twin
// of enforcer/runtime/buffers.py (read its docstring: in place for all_reduce and
// broadcast, the flat output for all_gather_into_tensor, a copy of the input
// for reduce_scatter_tensor, (N, D) blocks for even all_to_all_single; SUM,
// and AVG on floating point as the sum divided by the group size at the end;
// every dtype a plan names but int16; bool as its bytes).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/extension.h>

namespace p2 {

// The c10d call's arguments, as the backend received them.
struct OpArgs {
  std::vector<at::Tensor> tensors;      // all_reduce, broadcast: the call's tensors
  at::Tensor output, input;             // all_gather / reduce_scatter / all_to_all
  c10d::ReduceOp reduce_op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  int64_t root = 0;                     // broadcast
};

class OpBuffer {
 public:
  virtual ~OpBuffer() = default;
  // Adapter for `plan_kind` ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"),
  // or nullptr: the plan cannot run these arguments (the op passes through). `key_root`: the plan key's root.
  static std::unique_ptr<OpBuffer> adopt(const std::string& plan_kind, const OpArgs& args, int64_t key_root,
                                         int64_t size, int64_t rank);
  virtual void begin() = 0;             // ready buffer (and output) before the first motif
  virtual void finish() {}              // write the result back after the last motif

  at::Tensor buffer;                    // flat, or the input's (N, D) blocks for all-to-all
  at::Tensor output;                    // all-to-all: the output's (N, D) blocks
  std::vector<at::Tensor> result;       // the Work's result
  int64_t elements = 0;                 // what OpPlan.validate takes
  int64_t nbytes = 0;                   // must equal the plan key's bytes
  int64_t size = 0, rank = 0;           // group size, this rank's position
};

}  // namespace p2
