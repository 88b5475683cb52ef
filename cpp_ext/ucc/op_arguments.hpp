// The c10d op arguments of UccBackend, checked and laid out for one UCC collective.
//
// Checks refuse (one line, RuntimeError) what UCC cannot take before anything
// is posted; layouts make the contiguous buffers UCC needs (a flat copy of a
// list of tensors, a contiguous copy of a strided tensor) and add to a
// Collective's finish step the copies back into the caller's tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "ucc_collective.hpp"

namespace p2ucc {

// The one CPU tensor of a call.
at::Tensor& single(std::vector<at::Tensor>& tensors, const char* where);
// The one list of `size` tensors (one per member) of a call.
std::vector<at::Tensor>& single_list(std::vector<std::vector<at::Tensor>>& lists, int size, const char* where,
                                     const char* what);
// Every tensor a CPU tensor with `like`'s dtype and element count.
void require_like(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* where);
void require_dtype(const at::Tensor& a, const at::Tensor& b, const char* where);

// A contiguous tensor holding `tensor` (itself when it is contiguous already).
at::Tensor dense(const at::Tensor& tensor, const char* where);
// The tensors flattened one after the other (a copy).
at::Tensor flat_cat(const std::vector<at::Tensor>& tensors);

// Adds `next` after c's finish step.
void then(Collective& c, std::function<void()> next);
// After c: copy `from` back into `into` when it is a scratch copy of it.
void copy_back(Collective& c, const at::Tensor& into, const at::Tensor& from);
// After c: piece j of `flat` (pieces one after the other) into tensors[j].
void scatter_back(Collective& c, const std::vector<at::Tensor>& tensors, const at::Tensor& flat);

std::vector<uint64_t> prefix_sums(const std::vector<uint64_t>& counts);
// Element counts of an all_to_all_single side: split sizes along dim 0 (equal when none are given).
std::vector<uint64_t> split_counts(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size,
                                   const char* side);

}  // namespace p2ucc
