#include "scaled_work.hpp"

namespace p2 {

Scaling Scaling::of(const c10d::ReduceOp& op, bool lacks, const at::Tensor* sample) {
  Scaling scaling;
  if (!lacks || op.op_ != c10d::ReduceOp::PREMUL_SUM) return scaling;
  if (sample != nullptr && !at::isFloatingType(sample->scalar_type()) && !at::isComplexType(sample->scalar_type())) {
    TORCH_CHECK(false, "p2enforcer: ReduceOp.PREMUL_SUM needs floating-point tensors (got ", sample->scalar_type(),
                "); use SUM and multiply");
  }
  scaling.needed = true;
  auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "p2enforcer: ReduceOp.PREMUL_SUM without a factor; "
              "make it with torch.distributed._make_nccl_premul_sum(factor)");
  if (supplement->tensor_factor.defined()) {
    scaling.tensor_factor = supplement->tensor_factor;
  } else {
    scaling.factor = supplement->double_factor;
  }
  return scaling;
}

void Scaling::apply(at::Tensor& tensor) const {
  if (!needed || tensor.numel() == 0) return;
  if (tensor_factor.defined()) {
    tensor.mul_(tensor_factor.to(tensor.device()));
  } else if (factor != 1.0) {
    tensor.mul_(factor);
  }
}

c10::intrusive_ptr<c10::ivalue::Future> ScaledWork::getFuture() {
  if (!future_) {
    auto self = c10::intrusive_ptr<ScaledWork>::unsafe_reclaim_from_nonowning(this);
    future_ = inner_->getFuture()->then(
        [self](c10::ivalue::Future& done) {
          self->finish();
          return done.value();
        },
        inner_->getFuture()->elementType());
  }
  return future_;
}

}  // namespace p2
