// The buffer adapters of planned ops: the twins of enforcer/runtime/buffers.py, one
// class per plan kind, each deciding in adopt() whether the plan can run the
// call's arguments (no copies there), then readying the buffer in begin()
// and writing the result back in finish(). Which dtypes and reductions a plan
// takes, and why bool travels as its bytes: buffers.py's docstring.
#include "op_buffer.hpp"

#include <stdexcept>

namespace p2 {

namespace {

int64_t nbytes_of(const at::Tensor& tensor) { return static_cast<int64_t>(tensor.numel()) * tensor.element_size(); }

// buffers.PLANNED_DTYPES: every dtype a plan names but int16, which gloo has no collective for.
bool planned_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kByte: case at::kInt: case at::kLong: case at::kBool:
      return true;
    default:
      return false;
  }
}

// buffers._planned: the tensors share one dtype, and a plan takes it.
bool planned(const at::Tensor& first, const at::Tensor& second) {
  return planned_dtype(first.scalar_type()) && first.scalar_type() == second.scalar_type();
}

// buffers._average: AVG on floating point runs as the sum, divided by the group size at the end.
bool average(const c10d::ReduceOp& op, const at::Tensor& tensor) {
  return op.op_ == c10d::ReduceOp::AVG && tensor.is_floating_point();
}

// An op whose reduction the plan cannot run (buffers._summed): anything but SUM, and AVG on floating point.
bool unplannable(const c10d::ReduceOp& op, const at::Tensor& tensor) {
  return op.op_ != c10d::ReduceOp::SUM && !average(op, tensor);
}

// buffers._as_bytes: a bool tensor as its bytes (gloo sums bool bytewise); any other as it is.
at::Tensor as_bytes(const at::Tensor& tensor) {
  return tensor.scalar_type() == at::kBool ? tensor.view(at::kByte) : tensor;
}

void fill(OpBuffer& io, const at::Tensor& result, int64_t elements, int64_t nbytes, int64_t size, int64_t rank) {
  io.result = {result};
  io.elements = elements;
  io.nbytes = nbytes;
  io.size = size;
  io.rank = rank;
}

// all_reduce / broadcast: the one contiguous CPU tensor, flat, in place.
class InPlaceBuffer : public OpBuffer {
 public:
  InPlaceBuffer(const at::Tensor& tensor, int64_t size, int64_t rank, bool average)
      : tensor_(as_bytes(tensor)), average_(average) {
    fill(*this, tensor, tensor.numel(), nbytes_of(tensor), size, rank);
  }
  // The call's single tensor when the plan can address it, else nullptr.
  static const at::Tensor* single(const std::vector<at::Tensor>& tensors) {
    if (tensors.size() != 1 || !tensors[0].is_contiguous() || tensors[0].device().type() != c10::DeviceType::CPU ||
        !planned_dtype(tensors[0].scalar_type()))
      return nullptr;
    return &tensors[0];
  }
  void begin() override { buffer = tensor_.view(-1); }
  void finish() override {
    if (average_) tensor_.div_(size);
  }

 private:
  at::Tensor tensor_;
  bool average_;
};

std::unique_ptr<OpBuffer> adopt_all_reduce(const OpArgs& args, int64_t size, int64_t rank) {
  const at::Tensor* tensor = InPlaceBuffer::single(args.tensors);
  if (tensor == nullptr || unplannable(args.reduce_op, *tensor)) return nullptr;
  return std::make_unique<InPlaceBuffer>(*tensor, size, rank, average(args.reduce_op, *tensor));
}

std::unique_ptr<OpBuffer> adopt_broadcast(const OpArgs& args, int64_t key_root, int64_t size, int64_t rank) {
  const at::Tensor* tensor = InPlaceBuffer::single(args.tensors);
  if (tensor == nullptr || args.root != key_root) return nullptr;
  return std::make_unique<InPlaceBuffer>(*tensor, size, rank, false);
}

// all_gather_into_tensor: the flat output, this rank's block filled from the input first.
class AllGatherBuffer : public OpBuffer {
 public:
  AllGatherBuffer(const at::Tensor& output, const at::Tensor& input, int64_t size, int64_t rank)
      : output_(as_bytes(output)), input_(as_bytes(input)) {
    fill(*this, output, input.numel(), nbytes_of(output), size, rank);
  }
  static std::unique_ptr<OpBuffer> adopt(const OpArgs& args, int64_t size, int64_t rank) {
    if (!(args.output.is_contiguous() && args.input.is_contiguous()) ||
        args.output.numel() != size * args.input.numel() || !planned(args.output, args.input))
      return nullptr;
    return std::make_unique<AllGatherBuffer>(args.output, args.input, size, rank);
  }
  void begin() override {
    at::Tensor flat = output_.view(-1);
    const int64_t n = input_.numel();
    flat.slice(0, rank * n, (rank + 1) * n).copy_(input_.view(-1));
    buffer = flat;
  }

 private:
  at::Tensor output_, input_;
};

// reduce_scatter_tensor: a flat copy of the input; this rank's block goes to the output at the end.
class ReduceScatterBuffer : public OpBuffer {
 public:
  // bool output stays bool: the summed bytes are written back as bools (gloo's reduce_scatter gives 0 or 1).
  ReduceScatterBuffer(const at::Tensor& output, const at::Tensor& input, int64_t size, int64_t rank, bool average)
      : output_(output), input_(as_bytes(input)), average_(average) {
    fill(*this, output, output.numel(), nbytes_of(input), size, rank);
  }
  static std::unique_ptr<OpBuffer> adopt(const OpArgs& args, int64_t size, int64_t rank) {
    if (unplannable(args.reduce_op, args.input) || args.input.numel() != size * args.output.numel() ||
        !args.output.is_contiguous() || !planned(args.output, args.input))
      return nullptr;
    return std::make_unique<ReduceScatterBuffer>(args.output, args.input, size, rank,
                                                 average(args.reduce_op, args.input));
  }
  void begin() override { buffer = input_.reshape(-1).clone(); }
  void finish() override {
    const int64_t n = output_.numel();
    output_.view(-1).copy_(buffer.slice(0, rank * n, (rank + 1) * n));
    if (average_) output_.div_(size);
  }

 private:
  at::Tensor output_, input_;
  bool average_;
};

// all_to_all_single with even splits: the input's and the output's (N, D) blocks.
class AllToAllBuffer : public OpBuffer {
 public:
  AllToAllBuffer(const at::Tensor& output, const at::Tensor& input, int64_t size, int64_t rank)
      : output_(as_bytes(output)), input_(as_bytes(input)) {
    fill(*this, output, input.numel(), nbytes_of(input), size, rank);
  }
  static std::unique_ptr<OpBuffer> adopt(const OpArgs& args, int64_t size, int64_t rank) {
    if (args.input.numel() % size || args.output.numel() != args.input.numel() || !args.output.is_contiguous() ||
        !planned(args.output, args.input))
      return nullptr;
    return std::make_unique<AllToAllBuffer>(args.output, args.input, size, rank);
  }
  void begin() override {
    buffer = input_.reshape({size, -1});
    output = output_.view({size, -1});
  }

 private:
  at::Tensor output_, input_;
};

}  // namespace

std::unique_ptr<OpBuffer> OpBuffer::adopt(const std::string& plan_kind, const OpArgs& args, int64_t key_root,
                                          int64_t size, int64_t rank) {
  if (plan_kind == "all_reduce") return adopt_all_reduce(args, size, rank);
  if (plan_kind == "broadcast") return adopt_broadcast(args, key_root, size, rank);
  if (plan_kind == "all_gather") return AllGatherBuffer::adopt(args, size, rank);
  if (plan_kind == "reduce_scatter") return ReduceScatterBuffer::adopt(args, size, rank);
  if (plan_kind == "all_to_all") return AllToAllBuffer::adopt(args, size, rank);
  throw std::invalid_argument("no buffer adapter for plan kind '" + plan_kind +
                              "'; expected all_reduce, broadcast, all_gather, reduce_scatter or all_to_all");
}

}  // namespace p2
