// The per-rank op trace of the C++ p2enforcer backend: a bounded ring buffer.
//
// Every op that reaches an EnforcerBackend is recorded here, in submission
// order, with the fields of the Python trace (enforcer/trace.py): iteration,
// seq, group_seq, kind, dtype, bytes, group, issue and completion time,
// enforced, root. Times are seconds on the monotonic clock (the clock Python's
// time.perf_counter reads) since `started`, so records and the Python side's
// waits and motifs share one time line. The ring keeps the newest `capacity`
// ops; older ones are counted as dropped. enforcer/group/native.py turns a snapshot
// into the trace format.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace p2 {

// Op kinds, in the order of kOpKindNames (the names the Python trace uses).
enum class OpKind : uint8_t {
  AllReduce, AllReduceCoalesced, Broadcast, Reduce, Gather, Scatter, AllGather, AllGatherIntoTensor,
  AllGatherCoalesced, AllGatherIntoTensorCoalesced, ReduceScatter, ReduceScatterTensor,
  ReduceScatterTensorCoalesced, AllToAllSingle, AllToAll, Barrier, MonitoredBarrier, Send, Recv, Count
};
constexpr size_t kOpKinds = static_cast<size_t>(OpKind::Count);
extern const std::array<const char*, kOpKinds> kOpKindNames;

// Whether the plan runtime counts ops of this kind (optimizer_service.plan.trace.COMM_KINDS).
bool is_comm_kind(OpKind kind);

struct OpEntry {
  int64_t index = -1;        // position in the whole trace (issue order); -1: empty slot
  int64_t iteration = 0;
  int64_t seq = 0;
  int64_t group_seq = 0;
  OpKind kind = OpKind::Barrier;
  std::string dtype;
  int64_t bytes = 0;
  int32_t group = 0;         // OpTrace::group id
  double issued = 0.0;
  double completed = -1.0;   // < 0: not seen complete
  bool enforced = false;
  int32_t root = 0;
};

// One dispatcher wait for the next motif in plan order (optimizer_service.plan.trace.Wait).
struct WaitEntry {
  int64_t iteration = 0;
  int64_t order = 0;
  double seconds = 0.0;
};

// One motif a channel worker ran (optimizer_service.plan.trace.MotifRecord).
struct MotifEntry {
  int64_t iteration = 0;
  int64_t op_seq = 0;
  int64_t order = 0;
  int64_t channel = 0;
  double waited = 0.0;
  double start = 0.0;
  double seconds = 0.0;
};

// `since` for the readers below that means every kept record.
constexpr int64_t kAllIterations = std::numeric_limits<int64_t>::min();

// A bounded FIFO: the newest `capacity` items.
template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity) : items_(std::max<size_t>(capacity, 1)) {}
  void push(T item) {
    items_[static_cast<size_t>(next_ % static_cast<int64_t>(items_.size()))] = std::move(item);
    next_++;
  }
  std::vector<T> snapshot() const {
    int64_t size = static_cast<int64_t>(items_.size());
    std::vector<T> out;
    for (int64_t i = std::max<int64_t>(0, next_ - size); i < next_; ++i) out.push_back(items_[static_cast<size_t>(i % size)]);
    return out;
  }
  // The kept items of iteration `since` or later, oldest first, read back from the newest
  // until one older than `since - 1` (items are recorded in about iteration order).
  std::vector<T> since(int64_t first) const {
    if (first == kAllIterations) return snapshot();
    std::vector<T> out;
    int64_t size = static_cast<int64_t>(items_.size());
    for (int64_t i = next_ - 1; i >= std::max<int64_t>(0, next_ - size); --i) {
      const T& item = items_[static_cast<size_t>(i % size)];
      if (item.iteration < first - 1) break;
      if (item.iteration >= first) out.push_back(item);
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

 private:
  std::vector<T> items_;
  int64_t next_ = 0;
};

class OpTrace {
 public:
  OpTrace(size_t capacity, double started);

  // A group's global ranks and name; returns its id for issue().
  int32_t add_group(std::vector<int64_t> ranks, std::string name);
  // Record an op; returns its index (for complete / set_enforced) and its iteration and seq.
  OpEntry issue(OpKind kind, const std::string& dtype, int64_t bytes, int32_t group, int32_t root);
  void complete(int64_t index);
  void set_enforced(int64_t index);
  // Close the iteration (enforcer.step()); returns the new iteration.
  int64_t step();
  double now() const;

  int64_t iteration() const;
  int64_t steps() const;
  int64_t issued() const;
  int64_t dropped() const;
  std::array<int64_t, kOpKinds> counts() const;
  // Every kept op of iteration `since` or later (the least int64: all), oldest first.
  std::vector<OpEntry> snapshot(int64_t since = kAllIterations) const;
  std::vector<OpEntry> iteration_ops(int64_t iteration, size_t limit) const;
  std::pair<std::vector<int64_t>, std::string> group(int32_t id) const;

  // The plan runtime's records (the Python tracer's wait() and motif()).
  void add_wait(int64_t order, double seconds);
  void add_motif(const MotifEntry& motif);
  // The kept waits and motifs of iteration `since` or later, oldest first, read back from the
  // newest to one iteration before `since` (enforcer/trace.py, _newest).
  std::vector<WaitEntry> waits(int64_t since = kAllIterations) const;
  std::vector<MotifEntry> motifs(int64_t since = kAllIterations) const;
  // The first `limit` motifs of `iteration`'s ops in the order they finished, and how many
  // more there were; reads back from the newest only as far as the iteration before it
  // (enforcer/trace.py, Tracer.iteration_motifs), so the cost does not grow with the trace.
  std::pair<std::vector<MotifEntry>, int64_t> iteration_motifs(int64_t iteration, size_t limit) const;
  double waited() const;

 private:
  OpEntry* slot_of(int64_t index);
  mutable std::mutex mutex_;
  std::vector<OpEntry> ring_;
  double started_;
  int64_t next_ = 0;
  int64_t iteration_ = 0;
  int64_t steps_ = 0;
  int64_t seq_ = 0;
  std::unordered_map<int32_t, int64_t> group_seq_;
  std::array<int64_t, kOpKinds> counts_{};
  std::vector<std::pair<std::vector<int64_t>, std::string>> groups_;
  Ring<WaitEntry> waits_;
  Ring<MotifEntry> motifs_;
  double waited_ = 0.0;
};

}  // namespace p2
