// The Work the UCC backend hands back for each collective.
//
// Completed by the backend's progress thread (succeed / fail); until then
// wait() blocks on c10d::Work's condition variable (with the caller's timeout
// when one is given). getFuture() is a c10 Future of the op's output tensors,
// completed (or failed) at the same moment, so DDP's comm hooks and
// torch.futures callbacks work; its callbacks run on the progress thread.
#pragma once

#include <exception>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace p2ucc {

class UccWork : public c10d::Work {
 public:
  UccWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  void succeed();
  void fail(std::exception_ptr error);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace p2ucc
