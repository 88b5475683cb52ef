// The thread that drives a UCC backend: every UCC call of a backend's library,
// context and team — creation, collectives, progress, destruction — is made
// on it, which is what UCC's FUNNELED thread mode asks for.
//
// Why a thread rather than progress inside wait(): a Work's future must
// complete even when nobody waits on the Work (DDP's comm hooks and
// torch.futures callbacks chain on it), and UCC only advances when someone
// calls ucc_context_progress; gloo completes its works on its own threads too.
//
// Collectives are initialised and posted in the order submit() received them
// (the order every member must share), then polled: progress the context,
// test each request in flight, run the finish step and complete the Work.
// While nothing is in flight the thread sleeps on a condition variable; while
// something is, it polls, spinning briefly and then napping up to
// kMaxNap between polls so that several ranks on few cores do not starve.
//
// Timeouts: each collective carries its timeout to UCC (UCC_COLL_ARGS_FLAG_TIMEOUT),
// which then stops working on it — but UCC 1.3.0 does not report that through
// ucc_collective_test (the request stays "in progress"), so the engine fails
// the Work itself when the timeout has passed since the post, and leaves the
// request with UCC (ucc_request.hpp). A killed peer is seen this way: UCX's
// endpoints of a context made with an OOB have no error handling, so a dead
// peer's collective never completes. A failed or timed-out collective leaves
// the members out of step, so the engine then refuses every later collective
// with one line naming the first failure (`broken()`).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ucc_collective.hpp"
#include "ucc_request.hpp"
#include "ucc_team.hpp"
#include "ucc_work.hpp"

namespace p2ucc {

class ProgressEngine {
 public:
  ProgressEngine();
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Runs fn on the engine's thread between polls and waits for it; rethrows what it threw.
  void call(const std::function<void()>& fn);

  // Queues collective on team; work completes (or fails) with it.
  void submit(std::shared_ptr<Team> team, Collective collective, c10::intrusive_ptr<UccWork> work,
              std::chrono::milliseconds timeout);

  // Fails every collective in flight (their requests stay with UCC). Engine thread only (inside call()).
  void abandon_in_flight(const std::string& why);

  // The first failure after which collectives are refused ("" while healthy).
  std::string broken() const;
  // Whether a collective was left in flight inside UCC (its team must then never be destroyed).
  bool left_requests_in_ucc() const { return left_in_ucc_; }

  // Fails what is queued or in flight and joins the thread (idempotent).
  void stop();

 private:
  struct Pending {
    std::shared_ptr<Team> team;
    Collective collective;
    c10::intrusive_ptr<UccWork> work;
    std::chrono::milliseconds timeout;
  };
  struct InFlight {
    std::unique_ptr<Request> request;
    c10::intrusive_ptr<UccWork> work;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;
  };

  void loop();
  void begin(Pending& pending);
  bool poll();   // true when something finished
  void fail(c10::intrusive_ptr<UccWork>& work, const std::string& message);
  void mark_broken(const std::string& message);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  std::deque<std::packaged_task<void()>> calls_;
  bool stopping_ = false;
  std::string broken_;
  std::list<InFlight> in_flight_;      // engine thread only
  bool left_in_ucc_ = false;
  std::thread thread_;
};

}  // namespace p2ucc
