#include "ucc_work.hpp"

#include <ATen/core/jit_type.h>

namespace p2ucc {

UccWork::UccWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

// The future first: whoever wait() wakes may read the future's value at once.
void UccWork::succeed() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void UccWork::fail(std::exception_ptr error) {
  future_->setError(error);
  finish(error);
}

}  // namespace p2ucc
