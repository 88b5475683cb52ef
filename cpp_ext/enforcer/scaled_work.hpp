// PREMUL_SUM on inner backends that lack it (gloo; it has AVG since torch 2.x,
// so AVG passes through unchanged): the op runs as SUM and its outputs are
// multiplied by the factor once it completes (sum(f * x) = f * sum(x), up to
// rounding; the inputs are left as they are). The scaling happens exactly
// once, on whichever path sees the op done first: wait(), isCompleted(),
// result() or the future.
#pragma once

#include <mutex>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

namespace p2 {

// How to finish a SUM so it becomes `op`; `needed` is false for ops the inner backend runs itself.
struct Scaling {
  bool needed = false;
  double factor = 1.0;            // PREMUL_SUM with a double factor
  at::Tensor tensor_factor;       // PREMUL_SUM with a tensor factor

  // `lacks`: the inner backend has no PREMUL_SUM. Rejects it on integer tensors with one line.
  static Scaling of(const c10d::ReduceOp& op, bool lacks, const at::Tensor* sample);
  void apply(at::Tensor& tensor) const;
};

class ScaledWork : public c10d::Work {
 public:
  ScaledWork(c10::intrusive_ptr<c10d::Work> inner, std::vector<at::Tensor> outputs, Scaling scaling)
      : inner_(std::move(inner)), outputs_(std::move(outputs)), scaling_(std::move(scaling)) {}

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    bool done = inner_->wait(timeout);
    finish();
    return done;
  }
  bool isCompleted() override {
    bool done = inner_->isCompleted();
    if (done && inner_->isSuccess()) finish();
    return done;
  }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  std::vector<at::Tensor> result() override { finish(); return inner_->result(); }
  void synchronize() override { inner_->synchronize(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void finish() {
    std::call_once(once_, [this] {
      for (auto& tensor : outputs_) scaling_.apply(tensor);
    });
  }
  c10::intrusive_ptr<c10d::Work> inner_;
  std::vector<at::Tensor> outputs_;
  Scaling scaling_;
  std::once_flag once_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace p2
