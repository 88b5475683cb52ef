// torch's dtypes and c10d's ReduceOps as UCC datatypes and reduction ops.
//
// Reductions use UCC's predefined types and ops on CPU (ec/cpu), checked up
// front so that an unsupported combination fails on every member before
// anything is posted, with one line saying what to use instead: a combination
// UCC would only reject while reducing fails on some members mid-collective.
// Collectives that only move data see every tensor as bytes (UCC_DT_UINT8),
// so they take every dtype, bool and complex included.
#pragma once

#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <ucc/api/ucc.h>

namespace p2ucc {

// What a c10d reduction becomes: UCC's op, and the local steps around it.
struct Reduction {
  ucc_reduction_op_t op = UCC_OP_SUM;
  ucc_datatype_t dtype = UCC_DT_UINT8;
  bool divide_by_size = false;   // AVG: SUM, then divided by the group size
  double premul = 1.0;           // PREMUL_SUM: inputs scaled by this before the SUM
  bool has_premul = false;
};

// The reduction for op on tensors of dtype; throws one line when UCC 1.3.0
// cannot do it on CPU. "where" names the collective for the message.
Reduction reduction_for(const c10d::ReduceOp& op, at::ScalarType dtype, const char* where);

// "float32", "int64", ... for messages.
std::string dtype_name(at::ScalarType dtype);

// "SUM", "AVG", ... for messages.
std::string op_name(const c10d::ReduceOp& op);

}  // namespace p2ucc
