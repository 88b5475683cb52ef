#include "op_trace.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace p2 {

const std::array<const char*, kOpKinds> kOpKindNames = {
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "gather", "scatter", "all_gather",
    "all_gather_into_tensor", "all_gather_coalesced", "all_gather_into_tensor_coalesced", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "all_to_all_single", "all_to_all", "barrier",
    "monitored_barrier", "send", "recv"};

bool is_comm_kind(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: case OpKind::Broadcast: case OpKind::Reduce: case OpKind::AllGather:
    case OpKind::AllGatherIntoTensor: case OpKind::ReduceScatter: case OpKind::ReduceScatterTensor:
    case OpKind::AllToAll: case OpKind::AllToAllSingle:
      return true;
    default:
      return false;
  }
}

OpTrace::OpTrace(size_t capacity, double started)
    : ring_(std::max<size_t>(capacity, 1)), started_(started), waits_(capacity), motifs_(capacity) {}

double OpTrace::now() const {
  auto since_epoch = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count() - started_;
}

int32_t OpTrace::add_group(std::vector<int64_t> ranks, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.emplace_back(std::move(ranks), std::move(name));
  return static_cast<int32_t>(groups_.size() - 1);
}

OpEntry OpTrace::issue(OpKind kind, const std::string& dtype, int64_t bytes, int32_t group, int32_t root) {
  double issued = now();
  std::lock_guard<std::mutex> lock(mutex_);
  OpEntry& entry = ring_[static_cast<size_t>(next_ % static_cast<int64_t>(ring_.size()))];
  entry.index = next_++;
  entry.iteration = iteration_;
  entry.seq = seq_++;
  entry.group_seq = group_seq_[group]++;
  entry.kind = kind;
  entry.dtype = dtype;
  entry.bytes = bytes;
  entry.group = group;
  entry.issued = issued;
  entry.completed = -1.0;
  entry.enforced = false;
  entry.root = root;
  counts_[static_cast<size_t>(kind)]++;
  return entry;
}

OpEntry* OpTrace::slot_of(int64_t index) {
  if (index < 0) return nullptr;
  OpEntry& entry = ring_[static_cast<size_t>(index % static_cast<int64_t>(ring_.size()))];
  return entry.index == index ? &entry : nullptr;   // overwritten since: nothing to update
}

void OpTrace::complete(int64_t index) {
  double completed = now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (OpEntry* entry = slot_of(index)) entry->completed = completed;
}

void OpTrace::set_enforced(int64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (OpEntry* entry = slot_of(index)) entry->enforced = true;
}

int64_t OpTrace::step() {
  std::lock_guard<std::mutex> lock(mutex_);
  iteration_++;
  steps_++;
  seq_ = 0;
  group_seq_.clear();
  return iteration_;
}

int64_t OpTrace::iteration() const { std::lock_guard<std::mutex> lock(mutex_); return iteration_; }
int64_t OpTrace::steps() const { std::lock_guard<std::mutex> lock(mutex_); return steps_; }
int64_t OpTrace::issued() const { std::lock_guard<std::mutex> lock(mutex_); return next_; }

int64_t OpTrace::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::max<int64_t>(0, next_ - static_cast<int64_t>(ring_.size()));
}

std::array<int64_t, kOpKinds> OpTrace::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

std::vector<OpEntry> OpTrace::snapshot(int64_t since) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t size = static_cast<int64_t>(ring_.size());
  int64_t first = std::max<int64_t>(0, next_ - size);
  if (since != kAllIterations) {      // ops are in issue order: bisect for the first of `since` or later
    int64_t newer = next_;
    while (first < newer) {
      int64_t middle = first + (newer - first) / 2;
      if (ring_[static_cast<size_t>(middle % size)].iteration < since) first = middle + 1; else newer = middle;
    }
  }
  std::vector<OpEntry> out;
  out.reserve(static_cast<size_t>(next_ - first));
  for (int64_t i = first; i < next_; ++i) out.push_back(ring_[static_cast<size_t>(i % size)]);
  return out;
}

std::vector<OpEntry> OpTrace::iteration_ops(int64_t iteration, size_t limit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t size = static_cast<int64_t>(ring_.size());
  int64_t first = std::max<int64_t>(0, next_ - size);
  std::vector<OpEntry> found;
  for (int64_t i = next_ - 1; i >= first; --i) {
    const OpEntry& entry = ring_[static_cast<size_t>(i % size)];
    if (entry.iteration > iteration) continue;
    if (entry.iteration < iteration || found.size() == limit) break;
    found.push_back(entry);
  }
  std::reverse(found.begin(), found.end());
  return found;
}

std::pair<std::vector<int64_t>, std::string> OpTrace::group(int32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < 0 || static_cast<size_t>(id) >= groups_.size()) throw std::out_of_range("no such trace group");
  return groups_[static_cast<size_t>(id)];
}

void OpTrace::add_wait(int64_t order, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  waits_.push(WaitEntry{iteration_, order, seconds});
  waited_ += seconds;
}

void OpTrace::add_motif(const MotifEntry& motif) {
  std::lock_guard<std::mutex> lock(mutex_);
  motifs_.push(motif);
}

std::vector<WaitEntry> OpTrace::waits(int64_t since) const { std::lock_guard<std::mutex> lock(mutex_); return waits_.since(since); }
std::vector<MotifEntry> OpTrace::motifs(int64_t since) const { std::lock_guard<std::mutex> lock(mutex_); return motifs_.since(since); }
std::pair<std::vector<MotifEntry>, int64_t> OpTrace::iteration_motifs(int64_t iteration, size_t limit) const {
  std::vector<MotifEntry> found = motifs(iteration);       // and the next iterations' that finished meanwhile
  found.erase(std::remove_if(found.begin(), found.end(), [&](const MotifEntry& m) { return m.iteration != iteration; }),
              found.end());
  int64_t more = static_cast<int64_t>(found.size()) - static_cast<int64_t>(std::min(limit, found.size()));
  found.resize(found.size() - static_cast<size_t>(more));
  return {std::move(found), more};
}

double OpTrace::waited() const { std::lock_guard<std::mutex> lock(mutex_); return waited_; }

}  // namespace p2
