#include "ucc_types.hpp"

#include "ucc_error.hpp"

namespace p2ucc {

namespace {

// UCC's reduction type for dtype; false when UCC has none.
bool reduction_dtype(at::ScalarType dtype, ucc_datatype_t* out) {
  switch (dtype) {
    case at::kChar: *out = UCC_DT_INT8; return true;
    case at::kShort: *out = UCC_DT_INT16; return true;
    case at::kInt: *out = UCC_DT_INT32; return true;
    case at::kLong: *out = UCC_DT_INT64; return true;
    case at::kByte: *out = UCC_DT_UINT8; return true;
    case at::kUInt16: *out = UCC_DT_UINT16; return true;
    case at::kUInt32: *out = UCC_DT_UINT32; return true;
    case at::kUInt64: *out = UCC_DT_UINT64; return true;
    case at::kFloat: *out = UCC_DT_FLOAT32; return true;
    case at::kDouble: *out = UCC_DT_FLOAT64; return true;
    case at::kBFloat16: *out = UCC_DT_BFLOAT16; return true;
    case at::kComplexFloat: *out = UCC_DT_FLOAT32_COMPLEX; return true;
    case at::kComplexDouble: *out = UCC_DT_FLOAT64_COMPLEX; return true;
    default: return false;
  }
}

bool is_integer(at::ScalarType dtype) {
  return at::isIntegralType(dtype, /*includeBool=*/false);
}

}  // namespace

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(dtype);
  }
}

std::string op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

Reduction reduction_for(const c10d::ReduceOp& op, at::ScalarType dtype, const char* where) {
  Reduction r;
  const std::string what = std::string("ucc ") + where + ": ReduceOp." + op_name(op) + " on " +
                           dtype_name(dtype) + " tensors";
  if (!reduction_dtype(dtype, &r.dtype)) {
    refuse(what + " is not supported: UCC 1.3.0 reduces no " + dtype_name(dtype) +
           " on CPU; use float32, float64, bfloat16 or an integer type");
  }
  const bool complex = at::isComplexType(dtype);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = UCC_OP_SUM; break;
    case c10d::ReduceOp::PRODUCT: r.op = UCC_OP_PROD; break;
    case c10d::ReduceOp::MIN: r.op = UCC_OP_MIN; break;
    case c10d::ReduceOp::MAX: r.op = UCC_OP_MAX; break;
    case c10d::ReduceOp::BAND: r.op = UCC_OP_BAND; break;
    case c10d::ReduceOp::BOR: r.op = UCC_OP_BOR; break;
    case c10d::ReduceOp::BXOR: r.op = UCC_OP_BXOR; break;
    case c10d::ReduceOp::AVG:
      r.op = UCC_OP_SUM;
      r.divide_by_size = true;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.op = UCC_OP_SUM;
      r.has_premul = true;
      auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (supplement == nullptr) refuse(what + ": the op carries no factor");
      r.premul = supplement->tensor_factor.defined() ? supplement->tensor_factor.item<double>()
                                                     : supplement->double_factor;
      if (is_integer(dtype)) refuse(what + " is not supported: use a floating-point dtype");
      break;
    }
    default:
      refuse(what + " is not supported");
  }
  const bool bitwise = r.op == UCC_OP_BAND || r.op == UCC_OP_BOR || r.op == UCC_OP_BXOR;
  if (bitwise && !is_integer(dtype)) {
    refuse(what + " is not supported: bitwise reductions need an integer dtype");
  }
  if (complex && (r.op == UCC_OP_MIN || r.op == UCC_OP_MAX)) {
    refuse(what + " is not supported: complex numbers have no order");
  }
  return r;
}

}  // namespace p2ucc
