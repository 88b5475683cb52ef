// Enforcing a plan in C++: the twin of enforcer/runtime/plan_runtime.py's PlanRuntime (Syndicate §5,
// Pseudocode 2; read its docstring). Ops the plan names are submitted by the backend
// without Python; a dispatcher thread walks the iteration's motifs in plan order
// (dispatch.hpp decides), measuring its waits, and hands each motif to its channel's
// worker thread, which runs it on that channel's bare inner backend (motifs.hpp).
//
// Python builds it (enforcer/runtime/native.py): the plan's ops as plain values and
// the channel backends, made collectively by the Python PlanRuntime it derives from.
// The one call back into Python is the plan check of an op size not seen before
// (OpPlan.validate, once per op and size). Motifs of a channel whose backend is
// UCC, which has no send/recv, run as one UCC collective each (ucc_motifs.hpp)
// through the backend's p2::VCollectives, also without Python.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include "dispatch.hpp"
#include "motifs.hpp"
#include "op_buffer.hpp"
#include "op_trace.hpp"
#include "ucc_motifs.hpp"

namespace p2 {

struct MotifSpec {
  MotifKind kind;
  int64_t channel;
  std::vector<int64_t> ranks;                          // group positions
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::pair<int64_t, int64_t> window;
};

struct OpSpec {
  int64_t seq;
  std::string kind;                                    // plan kind: all_reduce, broadcast, all_gather, ...
  int64_t nbytes;
  std::string dtype;                                   // the op key's dtype name; empty: ops of any dtype
  int64_t root;
  std::vector<int64_t> group;                          // global ranks
  std::vector<MotifSpec> motifs;
  std::vector<std::vector<int>> dependencies;          // per motif: the motifs to finish first
};

using ChannelKey = std::pair<int64_t, std::vector<int64_t>>;     // (channel, its members' global ranks, sorted)

// A channel's bare backend for some members; a UCC one comes with its v-collectives (no send/recv).
struct ChannelBackend {
  c10::intrusive_ptr<c10d::Backend> backend;
  VCollectives* v_collectives = nullptr;                        // part of `backend`
};

class PlanRuntime : public std::enable_shared_from_this<PlanRuntime> {
 public:
  PlanRuntime(std::vector<OpSpec> ops, std::vector<std::vector<int64_t>> orders, int64_t me,
              std::map<ChannelKey, ChannelBackend> comms, std::shared_ptr<OpTrace> trace, pybind11::object validate);
  ~PlanRuntime();

  void start();
  // Take over a collective; nullptr: pass it through. `args` is null for ops the plan cannot run (it still counts them).
  c10::intrusive_ptr<c10d::Work> submit(OpKind kind, const OpEntry& entry, const OpArgs* args);
  void step();
  void close(bool abort);

  struct Submitted;                                   // one planned op of an iteration, as submitted
  void waiting_on(const std::shared_ptr<Submitted>& submitted);

 private:
  struct Iteration {
    std::vector<std::shared_ptr<Submitted>> ops;     // in submission order
    bool closed = false;
  };
  struct Handed {
    std::shared_ptr<Submitted> submitted;
    int motif;
  };

  bool dtype_fits(int op_index, const std::string& dtype);
  bool fits(int op_index, int64_t elements, int64_t nbytes);
  void dispatch_loop();
  bool walk(const std::shared_ptr<Iteration>& iteration);
  void hand_over(const std::shared_ptr<Submitted>& submitted, int motif);
  void work_loop(int64_t channel);
  void run_motif(Submitted& submitted, const MotifSpec& motif);
  void finished(const std::shared_ptr<Submitted>& submitted, int motif);
  void missing(int op_index);

  std::vector<OpSpec> ops_;
  dispatch::Schedule schedule_;
  int64_t me_;                                        // this rank's group position
  std::map<ChannelKey, std::unique_ptr<Peers>> peers_;
  std::shared_ptr<OpTrace> trace_;
  pybind11::object validate_;
  std::map<std::pair<int64_t, std::string>, int> index_;
  int64_t last_seq_ = -1;
  std::map<std::pair<int, int64_t>, bool> validated_;

  std::mutex mutex_;                                  // iterations, submissions, the stop flag
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Iteration>> iterations_;
  int64_t seq_ = 0;
  bool stepped_ = false;
  std::atomic<bool> stop_{false};
  size_t exited_ = 0;                                 // threads that returned
  std::vector<bool> warned_missing_;
  std::set<std::pair<int, std::string>> warned_dtype_;   // (op, dtype) whose mismatch was logged

  std::mutex queue_mutex_;                            // the channels' queues
  std::condition_variable queued_;
  std::map<int64_t, std::deque<Handed>> queues_;
  std::vector<std::thread> threads_;
};

}  // namespace p2
