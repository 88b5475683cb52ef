// A UCC team (ucc_team_create_post / _test / ucc_team_destroy), RAII.
//
// The members are the StoreOob's members (its size), this process being its
// rank: UCC all-gathers the team's addresses through it. Creation is
// non-blocking — the constructor posts, test() progresses the context once and
// says whether the team is ready, wait() repeats that until the team is ready
// or the timeout passes (then it throws). The destructor destroys a team whose
// creation finished (successfully or not); one still being created when its
// timeout passed is left alone (UCC forbids destroying it then).
#pragma once

#include <chrono>
#include <memory>

#include <ucc/api/ucc.h>

#include "store_oob.hpp"
#include "ucc_context.hpp"

namespace p2ucc {

class Team {
 public:
  Team(std::shared_ptr<Context> context, std::shared_ptr<StoreOob> oob, int rank, int size,
       std::chrono::milliseconds timeout);
  ~Team();
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  bool test();
  void wait();

  ucc_team_h handle() const { return team_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<Context>& context() const { return context_; }

 private:
  std::shared_ptr<Context> context_;
  std::shared_ptr<StoreOob> oob_;
  int rank_;
  int size_;
  std::chrono::steady_clock::time_point deadline_;
  ucc_team_h team_ = nullptr;
  bool ready_ = false;
  bool failed_ = false;
};

}  // namespace p2ucc
