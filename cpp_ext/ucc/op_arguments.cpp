#include "op_arguments.hpp"

#include "ucc_error.hpp"
#include "ucc_types.hpp"

namespace p2ucc {

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* where) {
  if (tensors.size() != 1) {
    refuse(std::string("ucc ") + where + ": expected one tensor per call, got " + std::to_string(tensors.size()));
  }
  if (!tensors[0].device().is_cpu()) {
    refuse(std::string("ucc ") + where + ": only CPU tensors are supported, got one on " + tensors[0].device().str());
  }
  return tensors[0];
}

std::vector<at::Tensor>& single_list(std::vector<std::vector<at::Tensor>>& lists, int size, const char* where,
                                     const char* what) {
  if (lists.size() != 1) {
    refuse(std::string("ucc ") + where + ": expected one list of " + what + ", got " + std::to_string(lists.size()));
  }
  if (lists[0].size() != static_cast<size_t>(size)) {
    refuse(std::string("ucc ") + where + ": expected " + std::to_string(size) + " " + what + " (one per member), got " +
           std::to_string(lists[0].size()));
  }
  return lists[0];
}

// The same tensors, checked: CPU, dtype and element count like `like`.
void require_like(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* where) {
  for (const auto& t : tensors) {
    if (!t.device().is_cpu()) refuse(std::string("ucc ") + where + ": only CPU tensors are supported");
    if (t.scalar_type() != like.scalar_type()) {
      refuse(std::string("ucc ") + where + ": every tensor must have dtype " + dtype_name(like.scalar_type()) +
             ", got " + dtype_name(t.scalar_type()));
    }
    if (t.numel() != like.numel()) {
      refuse(std::string("ucc ") + where + ": every tensor must have " + std::to_string(like.numel()) +
             " elements, got " + std::to_string(t.numel()));
    }
  }
}

void require_dtype(const at::Tensor& a, const at::Tensor& b, const char* where) {
  if (a.scalar_type() != b.scalar_type()) {
    refuse(std::string("ucc ") + where + ": input and output dtypes differ (" + dtype_name(a.scalar_type()) +
           " and " + dtype_name(b.scalar_type()) + ")");
  }
}

// A contiguous tensor holding `tensor` (itself when it is contiguous already).
at::Tensor dense(const at::Tensor& tensor, const char* where) {
  if (!tensor.device().is_cpu()) {
    refuse(std::string("ucc ") + where + ": only CPU tensors are supported, got one on " + tensor.device().str());
  }
  return tensor.is_contiguous() ? tensor : tensor.contiguous();
}

at::Tensor flat_cat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void then(Collective& c, std::function<void()> next) {
  if (!c.finish) {
    c.finish = std::move(next);
    return;
  }
  c.finish = [first = std::move(c.finish), next = std::move(next)] {
    first();
    next();
  };
}

// After c: copy `from` back into `into` when it is a scratch copy of it.
void copy_back(Collective& c, const at::Tensor& into, const at::Tensor& from) {
  if (from.is_same(into)) return;
  then(c, [into, from]() mutable { into.copy_(from.view_as(into)); });
}

// After c: piece j of `flat` (pieces one after the other) into tensors[j].
void scatter_back(Collective& c, const std::vector<at::Tensor>& tensors, const at::Tensor& flat) {
  then(c, [tensors, flat]() mutable {
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  });
}

std::vector<uint64_t> prefix_sums(const std::vector<uint64_t>& counts) {
  std::vector<uint64_t> displacements(counts.size());
  uint64_t offset = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    displacements[j] = offset;
    offset += counts[j];
  }
  return displacements;
}

// Element counts of an all_to_all_single side: split sizes along dim 0 (equal when none are given).
std::vector<uint64_t> split_counts(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size,
                                   const char* side) {
  const int64_t rows = tensor.dim() ? tensor.size(0) : tensor.numel();
  const int64_t row = rows ? tensor.numel() / rows : 0;
  std::vector<uint64_t> counts(size);
  if (splits.empty()) {
    if (rows % size != 0) {
      refuse(std::string("ucc alltoall_base: the ") + side + " tensor's first dimension (" + std::to_string(rows) +
             ") does not divide by the group size " + std::to_string(size) + "; give split sizes");
    }
    for (auto& n : counts) n = static_cast<uint64_t>(rows / size * row);
    return counts;
  }
  if (splits.size() != static_cast<size_t>(size)) {
    refuse(std::string("ucc alltoall_base: expected ") + std::to_string(size) + " " + side + " split sizes, got " +
           std::to_string(splits.size()));
  }
  int64_t total = 0;
  for (int j = 0; j < size; ++j) {
    if (splits[j] < 0) refuse(std::string("ucc alltoall_base: negative ") + side + " split size");
    counts[j] = static_cast<uint64_t>(splits[j] * row);
    total += splits[j];
  }
  if (total != rows) {
    refuse(std::string("ucc alltoall_base: the ") + side + " split sizes add up to " + std::to_string(total) +
           ", but the tensor's first dimension is " + std::to_string(rows));
  }
  return counts;
}

}  // namespace p2ucc
