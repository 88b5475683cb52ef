// The Work the C++ p2enforcer backend hands back for ops without a future.
//
// TrackedWork: an inner Work without a future (gloo's send/recv) that stamps
// the op's completion in the trace when it is seen complete (wait returns, or
// isCompleted says so). Works with a future get a callback instead
// (EnforcerBackend::track), which stamps the moment the backend finishes.
// Planned ops return plan_runtime.cpp's PlannedWork.
#pragma once

#include <atomic>
#include <memory>

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include "op_trace.hpp"

namespace p2 {

class TrackedWork : public c10d::Work {
 public:
  TrackedWork(c10::intrusive_ptr<c10d::Work> inner, std::shared_ptr<OpTrace> trace, int64_t index)
      : inner_(std::move(inner)), trace_(std::move(trace)), index_(index) {}

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    bool done = inner_->wait(timeout);
    report();
    return done;
  }
  bool isCompleted() override {
    bool done = inner_->isCompleted();
    if (done) report();
    return done;
  }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return inner_->result(); }
  void synchronize() override { inner_->synchronize(); }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return inner_->getFuture(); }

 private:
  void report() {
    if (!reported_.exchange(true)) trace_->complete(index_);
  }
  c10::intrusive_ptr<c10d::Work> inner_;
  std::shared_ptr<OpTrace> trace_;
  int64_t index_;
  std::atomic<bool> reported_{false};
};

}  // namespace p2
