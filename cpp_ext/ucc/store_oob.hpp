// UCC's out-of-band all-gather (ucc_oob_coll_t) over a c10d Store.
//
// UCC exchanges addresses while it creates a context or a team (and, for a
// context made with an OOB, runs a one-byte all-gather as a barrier when it is
// destroyed) through callbacks the caller supplies. StoreOob implements them
// on torch's key-value store: each all-gather is one *round*; member r writes
// its bytes under "<name>/<round>/<r>" and the round completes when every
// member's key is there. Every round has its own key prefix, so a later round
// never reads an earlier round's value (the store keeps keys until deleted).
// Rounds on one StoreOob run one after the other, as UCC issues them; a
// member deletes its key of round k-2 when it finishes round k, by which time
// every member has read it (they all finished round k-1).
//
// Non-blocking: allgather() only writes; req_test() checks which keys are
// there (Store::check) and reads the new ones. A round that is not complete by
// its deadline fails with UCC_ERR_TIMED_OUT, so a missing peer surfaces as an
// error instead of a hang. abandon() makes every later round fail at once
// (used to skip the teardown barrier when peers are known to be gone).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <ucc/api/ucc.h>

namespace p2ucc {

class StoreOob {
 public:
  StoreOob(c10::intrusive_ptr<c10d::Store> store, std::string name, int rank, int size,
           std::chrono::milliseconds timeout);
  ~StoreOob();
  StoreOob(const StoreOob&) = delete;
  StoreOob& operator=(const StoreOob&) = delete;

  // The callbacks UCC calls, bound to this object (which must outlive their use).
  ucc_oob_coll_t coll();

  // Later rounds wait at most `timeout` (e.g. a short teardown barrier).
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  // Later rounds fail immediately.
  void abandon() { abandoned_ = true; }

  uint64_t rounds() const { return next_round_; }
  // The last failure of a round, for error messages ("" if none).
  const std::string& last_error() const { return last_error_; }

 private:
  struct Round;
  static ucc_status_t allgather(void* src, void* dst, size_t size, void* info, void** request);
  static ucc_status_t test(void* request);
  static ucc_status_t release(void* request);

  ucc_status_t start(const void* src, void* dst, size_t size, void** request);
  ucc_status_t poll(Round& round);
  std::string key(uint64_t round, int rank) const;
  void forget(uint64_t round);

  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  bool abandoned_ = false;
  uint64_t next_round_ = 0;
  std::string last_error_;
};

}  // namespace p2ucc
