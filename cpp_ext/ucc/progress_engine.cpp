#include "progress_engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <set>

#include "ucc_error.hpp"

namespace p2ucc {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSpins = 200;                                 // polls before the first nap
constexpr auto kNap = std::chrono::microseconds(10);        // first nap; grows by this much per idle poll
constexpr auto kMaxNap = std::chrono::microseconds(200);

std::string seconds(std::chrono::milliseconds timeout) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", timeout.count() / 1000.0);
  return text;
}

}  // namespace

ProgressEngine::ProgressEngine() : thread_([this] { loop(); }) {}

ProgressEngine::~ProgressEngine() {
  stop();
}

void ProgressEngine::call(const std::function<void()>& fn) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  std::packaged_task<void()> task(fn);
  auto done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) p2ucc::fail("ucc: the backend was shut down");
    calls_.push_back(std::move(task));
  }
  wake_.notify_one();
  done.get();
}

void ProgressEngine::submit(std::shared_ptr<Team> team, Collective collective, c10::intrusive_ptr<UccWork> work,
                            std::chrono::milliseconds timeout) {
  std::string refusal;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      refusal = "ucc " + collective.name + ": the backend was shut down";
    } else if (!broken_.empty()) {
      refusal = "ucc " + collective.name + ": the backend is unusable since an earlier collective failed (" +
                broken_ + ")";
    } else {
      queue_.push_back(Pending{std::move(team), std::move(collective), std::move(work), timeout});
    }
  }
  if (!refusal.empty()) {
    work->fail(error_ptr(refusal));
    return;
  }
  wake_.notify_one();
}

std::string ProgressEngine::broken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void ProgressEngine::mark_broken(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.empty()) broken_ = message;
}

void ProgressEngine::fail(c10::intrusive_ptr<UccWork>& work, const std::string& message) {
  work->fail(error_ptr(message));
}

void ProgressEngine::begin(Pending& pending) {
  {
    std::string why = broken();
    if (!why.empty()) {
      fail(pending.work, "ucc " + pending.collective.name +
                             ": the backend is unusable since an earlier collective failed (" + why + ")");
      return;
    }
  }
  const std::string name = pending.collective.name;
  const double timeout_seconds = pending.timeout.count() / 1000.0;
  std::unique_ptr<Request> request;
  try {
    request = std::make_unique<Request>(pending.team, std::move(pending.collective), timeout_seconds);
    request->post();
  } catch (const std::exception& error) {
    // An init that UCC refuses is refused alike on every member; a failed post is not.
    if (request) mark_broken(first_line(error));
    fail(pending.work, first_line(error));
    return;
  }
  in_flight_.push_back(InFlight{std::move(request), std::move(pending.work),
                                Clock::now() + pending.timeout, pending.timeout});
}

bool ProgressEngine::poll() {
  std::set<Context*> contexts;
  for (auto& op : in_flight_) contexts.insert(op.request->team()->context().get());
  for (auto* context : contexts) context->progress();
  bool finished = false;
  const auto now = Clock::now();
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    ucc_status_t status;
    std::string finish_error;
    try {
      status = it->request->test();
    } catch (const std::exception& error) {   // the local finish step failed
      status = UCC_ERR_NO_MESSAGE;
      finish_error = first_line(error);
    }
    if (status == UCC_INPROGRESS) {
      if (now > it->deadline) {
        const std::string message = "ucc " + it->request->name() + " did not complete within its timeout of " +
                                    seconds(it->timeout) + " (a member died, hung, or called another collective)";
        mark_broken(message);
        fail(it->work, message);
        left_in_ucc_ = true;
        it = in_flight_.erase(it);     // the request stays with UCC (Request's destructor)
        finished = true;
        continue;
      }
      ++it;
      continue;
    }
    finished = true;
    if (status == UCC_OK) {
      it->work->succeed();
    } else {
      std::string message;
      if (!finish_error.empty()) {
        message = "ucc " + it->request->name() + ": " + finish_error;
      } else if (status == UCC_ERR_TIMED_OUT) {
        message = "ucc " + it->request->name() + " timed out after " + seconds(it->timeout) +
                  " (a member died, hung, or called another collective)";
      } else {
        message = describe(("ucc " + it->request->name()).c_str(), status);
      }
      mark_broken(message);
      fail(it->work, message);
    }
    it = in_flight_.erase(it);
  }
  return finished;
}

void ProgressEngine::abandon_in_flight(const std::string& why) {
  for (auto& op : in_flight_) {
    fail(op.work, "ucc " + op.request->name() + ": " + why);
    left_in_ucc_ = true;
  }
  in_flight_.clear();
}

void ProgressEngine::loop() {
  pthread_setname_np(pthread_self(), "p2-ucc-progress");
  int idle = 0;
  while (true) {
    std::deque<Pending> fresh;
    std::deque<std::packaged_task<void()>> calls;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (in_flight_.empty()) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !calls_.empty(); });
      }
      fresh.swap(queue_);
      calls.swap(calls_);
      stopping = stopping_;
    }
    for (auto& call : calls) call();
    if (stopping) {
      for (auto& pending : fresh) fail(pending.work, "ucc " + pending.collective.name + ": the backend was shut down");
      abandon_in_flight("the backend was shut down while it was in flight");
      return;
    }
    for (auto& pending : fresh) begin(pending);
    const bool finished = !in_flight_.empty() && poll();
    if (finished || !fresh.empty() || !calls.empty()) {
      idle = 0;
    } else if (++idle > kSpins) {
      std::this_thread::sleep_for(std::min<std::chrono::microseconds>(kMaxNap, kNap * (idle - kSpins)));
    }
  }
}

void ProgressEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) {
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();     // stopped from a callback on the thread itself: it exits after this call
    } else {
      thread_.join();
    }
  }
}

}  // namespace p2ucc
