#include "ucc_collective.hpp"

#include <numeric>

#include "ucc_error.hpp"

namespace p2ucc {

namespace {

ucc_coll_buffer_info_t typed(const at::Tensor& tensor, ucc_datatype_t dtype) {
  ucc_coll_buffer_info_t info{};
  info.buffer = tensor.numel() ? tensor.data_ptr() : nullptr;
  info.count = static_cast<ucc_count_t>(tensor.numel());
  info.datatype = dtype;
  info.mem_type = UCC_MEMORY_TYPE_HOST;
  return info;
}

ucc_coll_buffer_info_t bytes(const at::Tensor& tensor) {
  ucc_coll_buffer_info_t info = typed(tensor, UCC_DT_UINT8);
  info.count = static_cast<ucc_count_t>(tensor.nbytes());
  return info;
}

ucc_coll_buffer_info_v_t typed_v(const at::Tensor& tensor, ucc_datatype_t dtype, std::vector<uint64_t>& counts,
                                 std::vector<uint64_t>& displacements) {
  ucc_coll_buffer_info_v_t info{};
  info.buffer = tensor.numel() ? tensor.data_ptr() : nullptr;
  info.counts = reinterpret_cast<ucc_count_t*>(counts.data());
  info.displacements = displacements.empty() ? nullptr : reinterpret_cast<ucc_aint_t*>(displacements.data());
  info.datatype = dtype;
  info.mem_type = UCC_MEMORY_TYPE_HOST;
  return info;
}

// Element counts as byte counts of tensor's dtype.
std::vector<uint64_t> in_bytes(std::vector<uint64_t> elements, const at::Tensor& tensor) {
  for (auto& n : elements) n *= tensor.element_size();
  return elements;
}

Collective start(const char* name, ucc_coll_type_t type) {
  Collective c;
  c.name = name;
  c.args.coll_type = type;
  c.args.mask = UCC_COLL_ARGS_FIELD_FLAGS;
  c.args.flags = UCC_COLL_ARGS_FLAG_COUNT_64BIT | UCC_COLL_ARGS_FLAG_DISPLACEMENTS_64BIT;
  return c;
}

// AVG: the sum divided by the group size (integers truncate, as NCCL's AVG).
std::function<void()> divide(const at::Tensor& result, int size) {
  return [result, size]() mutable {
    if (at::isIntegralType(result.scalar_type(), /*includeBool=*/false)) {
      result.div_(size, "trunc");
    } else {
      result.div_(size);
    }
  };
}

// The input a reduction reads: PREMUL_SUM's scaled copy, else the tensor itself.
at::Tensor scaled(const at::Tensor& input, const Reduction& reduction) {
  return reduction.has_premul ? input.mul(reduction.premul) : input;
}

uint64_t total(const std::vector<uint64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), uint64_t{0});
}

void require_size(const at::Tensor& tensor, int64_t numel, const char* where, const char* what) {
  if (tensor.numel() != numel) {
    refuse(std::string("ucc ") + where + ": the " + what + " has " + std::to_string(tensor.numel()) +
           " elements, expected " + std::to_string(numel));
  }
}

}  // namespace

void require_dense_cpu(const at::Tensor& tensor, const char* where) {
  if (!tensor.device().is_cpu()) {
    refuse(std::string("ucc ") + where + ": only CPU tensors are supported, got one on " + tensor.device().str());
  }
  if (!tensor.is_contiguous()) {
    refuse(std::string("ucc ") + where + ": the tensor must be contiguous (call .contiguous() first)");
  }
}

Collective allreduce(const at::Tensor& tensor, const Reduction& reduction, int size) {
  require_dense_cpu(tensor, "allreduce");
  Collective c = start("allreduce", UCC_COLL_TYPE_ALLREDUCE);
  c.nothing_to_do = tensor.numel() == 0;
  if (reduction.has_premul && !c.nothing_to_do) tensor.mul_(reduction.premul);   // overwritten anyway
  c.args.flags |= UCC_COLL_ARGS_FLAG_IN_PLACE;
  c.args.dst.info = typed(tensor, reduction.dtype);
  c.args.src.info = c.args.dst.info;
  c.args.op = reduction.op;
  c.buffers = {tensor};
  if (reduction.divide_by_size) c.finish = divide(tensor, size);
  return c;
}

Collective broadcast(const at::Tensor& tensor, int root) {
  require_dense_cpu(tensor, "broadcast");
  Collective c = start("broadcast", UCC_COLL_TYPE_BCAST);
  c.nothing_to_do = tensor.numel() == 0;
  c.args.src.info = bytes(tensor);
  c.args.root = static_cast<uint64_t>(root);
  c.buffers = {tensor};
  return c;
}

Collective reduce(const at::Tensor& tensor, const Reduction& reduction, int root, int rank, int size) {
  require_dense_cpu(tensor, "reduce");
  Collective c = start("reduce", UCC_COLL_TYPE_REDUCE);
  c.nothing_to_do = tensor.numel() == 0;
  at::Tensor input = scaled(tensor, reduction);
  c.args.src.info = typed(input, reduction.dtype);
  c.args.root = static_cast<uint64_t>(root);
  c.args.op = reduction.op;
  if (rank == root) {
    c.args.dst.info = typed(tensor, reduction.dtype);
    if (input.is_same(tensor)) c.args.flags |= UCC_COLL_ARGS_FLAG_IN_PLACE;
    if (reduction.divide_by_size) c.finish = divide(tensor, size);
  }
  c.buffers = {tensor, input};
  return c;
}

Collective allgather(const at::Tensor& input, const at::Tensor& output, int size) {
  require_dense_cpu(input, "allgather");
  require_dense_cpu(output, "allgather");
  require_size(output, input.numel() * size, "allgather", "output");
  Collective c = start("allgather", UCC_COLL_TYPE_ALLGATHER);
  c.nothing_to_do = input.numel() == 0;
  c.args.src.info = bytes(input);
  c.args.dst.info = bytes(output);
  c.buffers = {input, output};
  return c;
}

Collective allgatherv_in_place(const at::Tensor& buffer, std::vector<uint64_t> counts,
                               std::vector<uint64_t> displacements) {
  require_dense_cpu(buffer, "allgatherv");
  if (counts.size() != displacements.size()) refuse("ucc allgatherv: one count and one displacement per member");
  for (size_t j = 0; j < counts.size(); ++j) {
    if (displacements[j] + counts[j] > static_cast<uint64_t>(buffer.numel())) {
      refuse("ucc allgatherv: member " + std::to_string(j) + "'s part ends past the buffer's " +
             std::to_string(buffer.numel()) + " elements");
    }
  }
  Collective c = start("allgatherv", UCC_COLL_TYPE_ALLGATHERV);
  c.nothing_to_do = total(counts) == 0;
  c.args.flags |= UCC_COLL_ARGS_FLAG_IN_PLACE;
  c.dst_counts = in_bytes(std::move(counts), buffer);
  c.dst_displacements = in_bytes(std::move(displacements), buffer);
  c.args.dst.info_v = typed_v(buffer, UCC_DT_UINT8, c.dst_counts, c.dst_displacements);
  c.buffers = {buffer};
  return c;
}

Collective reduce_scatter(const at::Tensor& input, const at::Tensor& output, const Reduction& reduction,
                          int size) {
  require_dense_cpu(input, "reduce_scatter");
  require_dense_cpu(output, "reduce_scatter");
  require_size(input, output.numel() * size, "reduce_scatter", "input");
  Collective c = start("reduce_scatter", UCC_COLL_TYPE_REDUCE_SCATTER);
  c.nothing_to_do = output.numel() == 0;
  at::Tensor source = scaled(input, reduction);
  c.args.src.info = typed(source, reduction.dtype);
  c.args.dst.info = typed(output, reduction.dtype);
  c.args.op = reduction.op;
  c.buffers = {source, output};
  if (reduction.divide_by_size) c.finish = divide(output, size);
  return c;
}

Collective reduce_scatterv(const at::Tensor& input, const at::Tensor& output, std::vector<uint64_t> counts,
                           const Reduction& reduction, int rank, int size) {
  require_dense_cpu(input, "reduce_scatterv");
  require_dense_cpu(output, "reduce_scatterv");
  if (counts.size() != static_cast<size_t>(size)) refuse("ucc reduce_scatterv: one count per member");
  require_size(input, static_cast<int64_t>(total(counts)), "reduce_scatterv", "input");
  require_size(output, static_cast<int64_t>(counts[rank]), "reduce_scatterv", "output");
  Collective c = start("reduce_scatterv", UCC_COLL_TYPE_REDUCE_SCATTERV);
  c.nothing_to_do = total(counts) == 0;
  at::Tensor source = scaled(input, reduction);
  c.args.src.info = typed(source, reduction.dtype);
  c.dst_counts = std::move(counts);
  c.args.dst.info_v = typed_v(output, reduction.dtype, c.dst_counts, c.dst_displacements);
  c.args.op = reduction.op;
  c.buffers = {source, output};
  if (reduction.divide_by_size) c.finish = divide(output, size);
  return c;
}

Collective alltoall(const at::Tensor& input, const at::Tensor& output, int size) {
  require_dense_cpu(input, "alltoall");
  require_dense_cpu(output, "alltoall");
  if (input.numel() != output.numel() || input.numel() % size != 0) {
    refuse("ucc alltoall: input and output must have the same number of elements, divisible by the group size " +
           std::to_string(size) + " (got " + std::to_string(input.numel()) + " and " +
           std::to_string(output.numel()) + ")");
  }
  Collective c = start("alltoall", UCC_COLL_TYPE_ALLTOALL);
  c.nothing_to_do = input.numel() == 0;
  c.args.src.info = bytes(input);
  c.args.dst.info = bytes(output);
  c.buffers = {input, output};
  return c;
}

Collective alltoallv(const at::Tensor& input, const at::Tensor& output, std::vector<uint64_t> send_counts,
                     std::vector<uint64_t> send_displacements, std::vector<uint64_t> recv_counts,
                     std::vector<uint64_t> recv_displacements) {
  require_dense_cpu(input, "alltoallv");
  require_dense_cpu(output, "alltoallv");
  const size_t n = send_counts.size();
  if (send_displacements.size() != n || recv_counts.size() != n || recv_displacements.size() != n) {
    refuse("ucc alltoallv: one send count, send displacement, receive count and receive displacement per member");
  }
  for (size_t j = 0; j < n; ++j) {
    if (send_displacements[j] + send_counts[j] > static_cast<uint64_t>(input.numel()) ||
        recv_displacements[j] + recv_counts[j] > static_cast<uint64_t>(output.numel())) {
      refuse("ucc alltoallv: the part for member " + std::to_string(j) + " ends past its buffer");
    }
  }
  Collective c = start("alltoallv", UCC_COLL_TYPE_ALLTOALLV);
  c.src_counts = in_bytes(std::move(send_counts), input);
  c.src_displacements = in_bytes(std::move(send_displacements), input);
  c.dst_counts = in_bytes(std::move(recv_counts), output);
  c.dst_displacements = in_bytes(std::move(recv_displacements), output);
  c.args.src.info_v = typed_v(input, UCC_DT_UINT8, c.src_counts, c.src_displacements);
  c.args.dst.info_v = typed_v(output, UCC_DT_UINT8, c.dst_counts, c.dst_displacements);
  c.buffers = {input, output};
  return c;
}

Collective barrier() {
  return start("barrier", UCC_COLL_TYPE_BARRIER);
}

Collective gather(const at::Tensor& input, const at::Tensor& output, int root, int rank, int size) {
  require_dense_cpu(input, "gather");
  Collective c = start("gather", UCC_COLL_TYPE_GATHER);
  c.nothing_to_do = input.numel() == 0;
  c.args.src.info = bytes(input);
  c.args.root = static_cast<uint64_t>(root);
  c.buffers = {input};
  if (rank == root) {
    require_dense_cpu(output, "gather");
    require_size(output, input.numel() * size, "gather", "output");
    c.args.dst.info = bytes(output);
    c.buffers.push_back(output);
  }
  return c;
}

Collective scatter(const at::Tensor& input, const at::Tensor& output, int root, int rank, int size) {
  // TL/UCP has no plain SCATTER in UCC 1.3.0: a SCATTERV with equal parts.
  require_dense_cpu(output, "scatter");
  Collective c = start("scatter", UCC_COLL_TYPE_SCATTERV);
  c.nothing_to_do = output.numel() == 0;
  c.args.dst.info = bytes(output);
  c.args.root = static_cast<uint64_t>(root);
  c.buffers = {output};
  if (rank == root) {
    require_dense_cpu(input, "scatter");
    require_size(input, output.numel() * size, "scatter", "input");
    c.src_counts.assign(size, output.nbytes());
    for (int j = 0; j < size; ++j) c.src_displacements.push_back(static_cast<uint64_t>(j) * output.nbytes());
    c.args.src.info_v = typed_v(input, UCC_DT_UINT8, c.src_counts, c.src_displacements);
    c.buffers.push_back(input);
  }
  return c;
}

}  // namespace p2ucc
