// One UCC collective on CPU tensors, described before it runs: the
// ucc_coll_args_t, the tensors its pointers point into (kept alive until UCC
// is done with them), the count/displacement arrays of the v-variants, and
// what to do locally once it succeeded (copy a scratch buffer out, divide an
// AVG). Builders below make each kind; both the backend and the Python
// bindings use them, and a Request (ucc_request.hpp) runs one.
//
// Counts and displacements are in elements of the tensors given; collectives
// that only move data are described in bytes (UCC_DT_UINT8) so every dtype
// works. Tensors must be contiguous and on the CPU (checked, one line).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ucc/api/ucc.h>

#include "ucc_types.hpp"

namespace p2ucc {

struct Collective {
  std::string name;                    // "allreduce", for messages
  ucc_coll_args_t args{};
  std::vector<at::Tensor> buffers;     // what args points into
  std::vector<uint64_t> src_counts, src_displacements, dst_counts, dst_displacements;
  std::function<void()> finish;        // after success, on the thread that saw it
  bool nothing_to_do = false;          // no member moves anything: completes without UCC
};

// In place on `tensor` (which must be contiguous). AVG divides afterwards;
// PREMUL_SUM scales `tensor` first (it is overwritten anyway).
Collective allreduce(const at::Tensor& tensor, const Reduction& reduction, int size);
Collective broadcast(const at::Tensor& tensor, int root);
// In place at the root; the other members' tensors are left as they were.
Collective reduce(const at::Tensor& tensor, const Reduction& reduction, int root, int rank, int size);
// output holds size * input.numel() elements, member j's input at j.
Collective allgather(const at::Tensor& input, const at::Tensor& output, int size);
// Every member's part is already in place at buffer[displacements[j] : +counts[j]].
Collective allgatherv_in_place(const at::Tensor& buffer, std::vector<uint64_t> counts,
                               std::vector<uint64_t> displacements);
// input holds the members' blocks one after the other; output gets this member's sum.
Collective reduce_scatter(const at::Tensor& input, const at::Tensor& output, const Reduction& reduction,
                          int size);
// As reduce_scatter with block j of counts[j] elements.
Collective reduce_scatterv(const at::Tensor& input, const at::Tensor& output, std::vector<uint64_t> counts,
                           const Reduction& reduction, int rank, int size);
Collective alltoall(const at::Tensor& input, const at::Tensor& output, int size);
// Element counts and displacements per member, in both directions.
Collective alltoallv(const at::Tensor& input, const at::Tensor& output, std::vector<uint64_t> send_counts,
                     std::vector<uint64_t> send_displacements, std::vector<uint64_t> recv_counts,
                     std::vector<uint64_t> recv_displacements);
Collective barrier();
// output (only read at the root) holds size * input.numel() elements.
Collective gather(const at::Tensor& input, const at::Tensor& output, int root, int rank, int size);
// input (only read at the root) holds size * output.numel() elements.
Collective scatter(const at::Tensor& input, const at::Tensor& output, int root, int rank, int size);

// Throws one line unless tensor is a contiguous CPU tensor.
void require_dense_cpu(const at::Tensor& tensor, const char* where);

}  // namespace p2ucc
