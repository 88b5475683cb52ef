#include "store_oob.hpp"

#include "ucc_error.hpp"

#include <cstring>
#include <exception>
#include <thread>

namespace p2ucc {

namespace {

using Clock = std::chrono::steady_clock;

// req_test is called in tight loops (UCC's teardown barrier spins on it):
// the store is asked at most this often; in between a test sleeps briefly.
constexpr auto kPollInterval = std::chrono::microseconds(500);
constexpr auto kPollNap = std::chrono::microseconds(100);

}  // namespace

struct StoreOob::Round {
  StoreOob* owner;
  uint64_t index;
  void* dst;
  size_t size;
  Clock::time_point deadline;
  Clock::time_point last_poll;
  std::vector<std::string> keys;   // every member's key, in member order
  bool done = false;
};

StoreOob::StoreOob(c10::intrusive_ptr<c10d::Store> store, std::string name, int rank, int size,
                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), name_(std::move(name)), rank_(rank), size_(size), timeout_(timeout) {}

StoreOob::~StoreOob() {
  // The keys of the last two rounds are still there; peers may be reading them.
}

ucc_oob_coll_t StoreOob::coll() {
  ucc_oob_coll_t oob{};
  oob.allgather = &StoreOob::allgather;
  oob.req_test = &StoreOob::test;
  oob.req_free = &StoreOob::release;
  oob.coll_info = this;
  oob.n_oob_eps = static_cast<uint32_t>(size_);
  oob.oob_ep = static_cast<uint32_t>(rank_);
  return oob;
}

std::string StoreOob::key(uint64_t round, int rank) const {
  return name_ + "/" + std::to_string(round) + "/" + std::to_string(rank);
}

ucc_status_t StoreOob::allgather(void* src, void* dst, size_t size, void* info, void** request) {
  return static_cast<StoreOob*>(info)->start(src, dst, size, request);
}

ucc_status_t StoreOob::start(const void* src, void* dst, size_t size, void** request) {
  *request = nullptr;
  if (abandoned_) {
    last_error_ = "out-of-band all-gather '" + name_ + "' abandoned";
    return UCC_ERR_TIMED_OUT;
  }
  auto round = std::make_unique<Round>();
  round->owner = this;
  round->index = next_round_++;
  round->dst = dst;
  round->size = size;
  round->deadline = Clock::now() + timeout_;
  round->last_poll = Clock::time_point{};
  for (int r = 0; r < size_; ++r) round->keys.push_back(key(round->index, r));
  try {
    const auto* bytes = static_cast<const uint8_t*>(src);
    store_->set(round->keys[rank_], std::vector<uint8_t>(bytes, bytes + size));
  } catch (const std::exception& error) {
    last_error_ = std::string("out-of-band all-gather: the store refused a write: ") + first_line(error);
    return UCC_ERR_NO_MESSAGE;
  }
  *request = round.release();
  return UCC_OK;
}

ucc_status_t StoreOob::test(void* request) {
  auto* round = static_cast<Round*>(request);
  return round->owner->poll(*round);
}

ucc_status_t StoreOob::poll(Round& round) {
  if (round.done) return UCC_OK;
  const auto now = Clock::now();
  if (abandoned_ || now > round.deadline) {
    last_error_ = "out-of-band all-gather '" + name_ + "' round " + std::to_string(round.index) +
                  ": not every member arrived within the timeout";
    return UCC_ERR_TIMED_OUT;
  }
  if (now - round.last_poll < kPollInterval) {
    std::this_thread::sleep_for(kPollNap);
    return UCC_INPROGRESS;
  }
  round.last_poll = now;
  try {
    if (!store_->check(round.keys)) return UCC_INPROGRESS;
    auto values = store_->multiGet(round.keys);
    for (int r = 0; r < size_; ++r) {
      if (values[r].size() != round.size) {
        last_error_ = "out-of-band all-gather '" + name_ + "': member " + std::to_string(r) + " sent " +
                      std::to_string(values[r].size()) + " bytes, expected " + std::to_string(round.size);
        return UCC_ERR_INVALID_PARAM;
      }
      std::memcpy(static_cast<uint8_t*>(round.dst) + r * round.size, values[r].data(), round.size);
    }
  } catch (const std::exception& error) {
    last_error_ = std::string("out-of-band all-gather: the store failed: ") + first_line(error);
    return UCC_ERR_NO_MESSAGE;
  }
  round.done = true;
  if (round.index >= 2) forget(round.index - 2);
  return UCC_OK;
}

void StoreOob::forget(uint64_t round) {
  try {
    store_->deleteKey(key(round, rank_));
  } catch (const std::exception&) {
    // Not every store deletes keys; a left-over key is harmless (its round is over).
  }
}

ucc_status_t StoreOob::release(void* request) {
  delete static_cast<Round*>(request);
  return UCC_OK;
}

}  // namespace p2ucc
