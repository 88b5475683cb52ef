#include "ucc_request.hpp"

#include <utility>

#include "ucc_error.hpp"

namespace p2ucc {

Request::Request(std::shared_ptr<Team> team, Collective collective, double timeout_seconds)
    : team_(std::move(team)), collective_(std::make_unique<Collective>(std::move(collective))) {
  if (collective_->nothing_to_do) return;
  if (timeout_seconds > 0) {
    collective_->args.flags |= UCC_COLL_ARGS_FLAG_TIMEOUT;
    collective_->args.timeout = timeout_seconds;
  }
  const std::string what = "ucc_collective_init (" + collective_->name + ")";
  check(ucc_collective_init(&collective_->args, &request_, team_->handle()), what.c_str());
}

void Request::post() {
  if (posted_) refuse("ucc " + collective_->name + ": the request was posted already");
  posted_ = true;
  if (collective_->nothing_to_do) {
    status_ = UCC_OK;
    if (collective_->finish) collective_->finish();
    return;
  }
  status_ = UCC_INPROGRESS;
  ucc_status_t status = ucc_collective_post(request_);
  if (status < 0) {
    status_ = status;
    fail(describe(("ucc_collective_post (" + collective_->name + ")").c_str(), status));
  }
}

ucc_status_t Request::test() {
  if (!posted_) refuse("ucc " + collective_->name + ": test before post");
  if (status_ != UCC_INPROGRESS) return status_;
  ucc_status_t status = ucc_collective_test(request_);
  if (status == UCC_INPROGRESS) return status;
  status_ = status;
  if (status == UCC_OK && collective_->finish) collective_->finish();
  return status_;
}

void Request::finalize() {
  if (request_ == nullptr) return;
  if (status_ == UCC_INPROGRESS) refuse("ucc " + collective_->name + ": cannot finalize a request in progress");
  check(ucc_collective_finalize(request_), "ucc_collective_finalize");
  request_ = nullptr;
}

Request::~Request() {
  if (request_ == nullptr) return;
  if (status_ == UCC_INPROGRESS) {
    // UCC still owns the buffers and the team: keep them (and the request) forever.
    (void)collective_.release();
    (void)new std::shared_ptr<Team>(std::move(team_));
    return;
  }
  ucc_collective_finalize(request_);
}

}  // namespace p2ucc
