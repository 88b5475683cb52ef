#include "plan_runtime.hpp"

#include <algorithm>
#include <cstdio>

#include <ATen/core/ivalue.h>

namespace py = pybind11;

namespace p2 {

struct PlanRuntime::Submitted {
  int op_index;
  const OpSpec* op;
  std::unique_ptr<OpBuffer> io;
  int64_t record;                                 // the op's index in the trace
  int64_t iteration, seq;
  c10::intrusive_ptr<c10::ivalue::Future> future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  std::atomic<bool> settled{false};               // the future was given its value or error
  // Guarded by the runtime's mutex_:
  std::vector<bool> handed;
  int dispatched = 0;
  int remaining;
  bool waited = false;
  // Written by the dispatcher before the hand-over, read by the worker after it:
  std::map<int, double> waits;
  // Which motifs finished (their dependants wait for them):
  std::mutex done_mutex;
  std::condition_variable done_changed;
  std::vector<bool> done;

  Submitted(int index, const OpSpec* spec, std::unique_ptr<OpBuffer> buffer, const OpEntry& entry)
      : op_index(index), op(spec), io(std::move(buffer)), record(entry.index), iteration(entry.iteration),
        seq(entry.seq), handed(spec->motifs.size(), false), remaining(static_cast<int>(spec->motifs.size())),
        done(spec->motifs.size(), false) {}
};

namespace {

// The Work of a planned op: tells the dispatcher when the program waits on it.
class PlannedWork : public c10d::Work {
 public:
  PlannedWork(std::weak_ptr<PlanRuntime> runtime, std::shared_ptr<PlanRuntime::Submitted> submitted)
      : runtime_(std::move(runtime)), submitted_(std::move(submitted)) {}

  bool wait(std::chrono::milliseconds /*timeout*/ = kNoTimeout) override {
    if (auto runtime = runtime_.lock()) runtime->waiting_on(submitted_);
    submitted_->future->wait();
    if (submitted_->future->hasError()) std::rethrow_exception(submitted_->future->exception_ptr());
    return true;
  }
  bool isCompleted() override { return submitted_->future->completed(); }
  bool isSuccess() const override { return submitted_->future->completed() && !submitted_->future->hasError(); }
  std::exception_ptr exception() const override {
    return submitted_->future->hasError() ? submitted_->future->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return submitted_->future->value().toTensorVector(); }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return submitted_->future; }

 private:
  std::weak_ptr<PlanRuntime> runtime_;
  std::shared_ptr<PlanRuntime::Submitted> submitted_;
};

const char* plan_kind_of(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::AllGatherIntoTensor: return "all_gather";
    case OpKind::ReduceScatterTensor: return "reduce_scatter";
    case OpKind::AllToAllSingle: return "all_to_all";
    default: return nullptr;
  }
}

std::vector<at::Tensor> parts_of(const at::Tensor& buffer, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<at::Tensor> parts;
  parts.reserve(ranges.size());
  for (const auto& [lo, hi] : ranges) parts.push_back(buffer.narrow(0, lo, hi - lo));
  return parts;
}

}  // namespace

PlanRuntime::PlanRuntime(std::vector<OpSpec> ops, std::vector<std::vector<int64_t>> orders, int64_t me,
                         std::map<ChannelKey, ChannelBackend> comms, std::shared_ptr<OpTrace> trace,
                         py::object validate)
    : ops_(std::move(ops)), schedule_(dispatch::Schedule::of(std::move(orders))), me_(me), trace_(std::move(trace)),
      validate_(std::move(validate)), warned_missing_(ops_.size(), false) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    index_[{ops_[i].seq, ops_[i].kind}] = static_cast<int>(i);
    last_seq_ = std::max(last_seq_, ops_[i].seq);
  }
  int64_t global_rank = ops_.empty() ? 0 : ops_[0].group.at(static_cast<size_t>(me_));
  for (auto& [key, channel] : comms) {
    peers_[key] = std::make_unique<Peers>(channel.backend, key.second, global_rank, channel.v_collectives);
    queues_[key.first];
  }
  for (const auto& op : ops_)
    for (const auto& motif : op.motifs) queues_[motif.channel];
  iterations_.push_back(std::make_shared<Iteration>());
}

PlanRuntime::~PlanRuntime() {
  close(true);
  for (auto& thread : threads_)
    if (thread.joinable()) thread.detach();
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    validate_ = py::object();
  } else {
    validate_.release();
  }
}

void PlanRuntime::start() {
  if (!threads_.empty()) return;
  auto self = shared_from_this();
  auto run = [self](auto body) {
    return [self, body] {
      body();
      {
        std::lock_guard<std::mutex> lock(self->mutex_);
        self->exited_++;
      }
      self->changed_.notify_all();
    };
  };
  for (auto& [channel, queue] : queues_) {
    int64_t c = channel;
    threads_.emplace_back(run([self, c] { self->work_loop(c); }));
  }
  threads_.emplace_back(run([self] { self->dispatch_loop(); }));
}

// ------------------------------------------------------------------ submit
c10::intrusive_ptr<c10d::Work> PlanRuntime::submit(OpKind kind, const OpEntry& entry, const OpArgs* args) {
  std::shared_ptr<Iteration> iteration;
  int64_t seq;
  bool last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seq = seq_++;
    iteration = iterations_.back();
    last = !stepped_ && seq >= last_seq_;
    if (last) {                 // no step(): the iteration ends after the plan's last op
      iterations_.push_back(std::make_shared<Iteration>());
      seq_ = 0;
    }
  }
  std::shared_ptr<Submitted> submitted;
  const char* plan_kind = plan_kind_of(kind);
  if (plan_kind != nullptr && args != nullptr) {
    auto found = index_.find({seq, plan_kind});
    if (found != index_.end() && dtype_fits(found->second, entry.dtype)) {
      const OpSpec& op = ops_[static_cast<size_t>(found->second)];
      auto io = OpBuffer::adopt(plan_kind, *args, op.root, static_cast<int64_t>(op.group.size()), me_);
      if (io && fits(found->second, io->elements, io->nbytes)) {
        io->begin();
        submitted = std::make_shared<Submitted>(found->second, &op, std::move(io), entry);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (submitted) {
      trace_->set_enforced(entry.index);
      iteration->ops.push_back(submitted);
    }
    iteration->closed = iteration->closed || last;
  }
  changed_.notify_all();
  if (!submitted) return nullptr;
  return c10::make_intrusive<PlannedWork>(weak_from_this(), submitted);
}

// PlanRuntime._dtype_fits: the op key names no dtype, or this one; why not is logged once per op and dtype.
bool PlanRuntime::dtype_fits(int op_index, const std::string& dtype) {
  const OpSpec& op = ops_[static_cast<size_t>(op_index)];
  if (op.dtype.empty() || op.dtype == dtype) return true;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = warned_dtype_.insert({op_index, dtype}).second;
  }
  if (first) {
    std::string group;
    for (size_t k = 0; k < op.group.size(); ++k) group += (k ? "," : "") + std::to_string(op.group[k]);
    std::string source = op.kind == "broadcast" ? " from position " + std::to_string(op.root) : "";
    std::fprintf(stderr, "p2enforcer: plan op %lld (%s of %s%s on group [%s]) is for %s elements but the op's are %s; "
                 "passing the op through\n", static_cast<long long>(op.seq), op.kind.c_str(), op.dtype.c_str(),
                 source.c_str(), group.c_str(), op.dtype.c_str(), dtype.c_str());
  }
  return false;
}

bool PlanRuntime::fits(int op_index, int64_t elements, int64_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = validated_.find({op_index, elements});
    if (found != validated_.end()) return found->second;
  }
  bool ok = nbytes == ops_[static_cast<size_t>(op_index)].nbytes;
  if (ok) {                     // once per op and size: OpPlan.validate, in Python (it logs why not)
    py::gil_scoped_acquire gil;
    ok = validate_(op_index, elements).cast<bool>();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  validated_[{op_index, elements}] = ok;
  return ok;
}

void PlanRuntime::waiting_on(const std::shared_ptr<Submitted>& submitted) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted->waited = true;
  }
  changed_.notify_all();
}

// ---------------------------------------------------------------- iterations
void PlanRuntime::step() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stepped_ = true;
    if (seq_ == 0 && iterations_.back()->ops.empty()) return;   // it already ended after the plan's last op
    iterations_.back()->closed = true;
    iterations_.push_back(std::make_shared<Iteration>());
    seq_ = 0;
  }
  changed_.notify_all();
}

void PlanRuntime::close(bool abort) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  changed_.notify_all();
  { std::lock_guard<std::mutex> lock(queue_mutex_); }
  queued_.notify_all();
  if (abort) return;
  // Threads stuck in a transfer whose peer is gone are left behind (they hold the runtime) once
  // the channel backends are shut down they fail and exit; as the Python runtime's join(timeout=5).
  bool all_exited;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    all_exited = changed_.wait_for(lock, std::chrono::seconds(5), [&] { return exited_ == threads_.size(); });
  }
  for (auto& thread : threads_) {
    if (!thread.joinable() || thread.get_id() == std::this_thread::get_id()) continue;
    if (all_exited) {
      thread.join();
    } else {
      thread.detach();
    }
  }
}

// ---------------------------------------------------------------- dispatcher
void PlanRuntime::dispatch_loop() {
  while (true) {
    std::shared_ptr<Iteration> iteration;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      iteration = iterations_.front();
    }
    if (!walk(iteration)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (iterations_.size() > 1) iterations_.pop_front();
  }
}

bool PlanRuntime::walk(const std::shared_ptr<Iteration>& iteration) {
  dispatch::Cursor cursor;
  while (true) {
    dispatch::Step step;
    std::vector<Handed> handing;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (true) {
        if (stop_) return false;
        dispatch::IterationView view;
        view.closed = iteration->closed;
        view.ops.reserve(iteration->ops.size());
        for (const auto& s : iteration->ops) view.ops.push_back({s->op_index, s->dispatched, &s->handed, s->waited});
        step = dispatch::next_step(schedule_, cursor, view, trace_->now());
        cursor = step.cursor;
        if (!step.blocked) break;
        changed_.wait(lock);
      }
      for (const auto& [op_index, motif] : step.hand_over) {
        for (const auto& s : iteration->ops) {
          if (s->op_index != op_index) continue;
          s->handed[static_cast<size_t>(motif)] = true;
          s->dispatched++;
          handing.push_back({s, motif});
          break;
        }
      }
    }
    if (step.waited) {
      auto [order, seconds] = *step.waited;
      trace_->add_wait(order, seconds);
      for (auto& h : handing)
        if (schedule_.orders[static_cast<size_t>(h.submitted->op_index)][static_cast<size_t>(h.motif)] == order)
          h.submitted->waits[h.motif] = seconds;
    }
    if (step.missing) missing(*step.missing);
    for (auto& h : handing) hand_over(h.submitted, h.motif);
    if (step.finished) return true;
  }
}

void PlanRuntime::missing(int op_index) {
  if (warned_missing_[static_cast<size_t>(op_index)]) return;
  warned_missing_[static_cast<size_t>(op_index)] = true;
  const OpSpec& op = ops_[static_cast<size_t>(op_index)];
  std::fprintf(stderr, "p2enforcer: planned op %lld (%s, %lld bytes) did not come in this iteration; "
               "its motifs are skipped\n", static_cast<long long>(op.seq), op.kind.c_str(),
               static_cast<long long>(op.nbytes));
}

void PlanRuntime::hand_over(const std::shared_ptr<Submitted>& submitted, int motif) {
  const MotifSpec& spec = submitted->op->motifs[static_cast<size_t>(motif)];
  if (std::find(spec.ranks.begin(), spec.ranks.end(), me_) == spec.ranks.end()) {
    finished(submitted, motif);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queues_[spec.channel].push_back({submitted, motif});
  }
  queued_.notify_all();
}

// ------------------------------------------------------------------- workers
void PlanRuntime::work_loop(int64_t channel) {
  // Motifs write into views the calling thread made, possibly under no_grad; grad mode is per thread.
  c10::AutoGradMode no_grad(false);
  auto& queue = queues_[channel];
  while (true) {
    Handed handed;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queued_.wait(lock, [&] { return !queue.empty() || stop_.load(); });
      if (queue.empty()) return;              // stopped
      handed = std::move(queue.front());
      queue.pop_front();
    }
    Submitted& s = *handed.submitted;
    {
      std::unique_lock<std::mutex> lock(s.done_mutex);
      for (int before : s.op->dependencies[static_cast<size_t>(handed.motif)])   // polls the stop flag too
        while (!s.done[static_cast<size_t>(before)] && !stop_) s.done_changed.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (stop_) return;
    const MotifSpec& motif = s.op->motifs[static_cast<size_t>(handed.motif)];
    try {                     // whatever fails here reaches the op's waiter: a worker never dies
      double start = trace_->now();
      run_motif(s, motif);
      auto waited = s.waits.find(handed.motif);
      trace_->add_motif(MotifEntry{s.iteration, s.seq,
                                   schedule_.orders[static_cast<size_t>(s.op_index)][static_cast<size_t>(handed.motif)],
                                   channel, waited == s.waits.end() ? 0.0 : waited->second, start,
                                   trace_->now() - start});
    } catch (const std::exception& error) {
      std::fprintf(stderr, "p2enforcer: motif %d of op %lld failed: %s\n", handed.motif,
                   static_cast<long long>(s.op->seq), error.what());
      if (!s.settled.exchange(true)) s.future->setError(std::current_exception());
    }
    finished(handed.submitted, handed.motif);
  }
}

void PlanRuntime::finished(const std::shared_ptr<Submitted>& submitted, int motif) {
  {
    std::lock_guard<std::mutex> lock(submitted->done_mutex);
    submitted->done[static_cast<size_t>(motif)] = true;
  }
  submitted->done_changed.notify_all();
  bool last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last = --submitted->remaining == 0;
  }
  if (last && !submitted->settled.exchange(true)) {
    try {
      submitted->io->finish();
      trace_->complete(submitted->record);
      submitted->future->markCompleted(c10::IValue(submitted->io->result));
    } catch (const std::exception&) {
      submitted->future->setError(std::current_exception());
    }
  }
}

void PlanRuntime::run_motif(Submitted& submitted, const MotifSpec& motif) {
  const auto& group = submitted.op->group;
  std::vector<int64_t> members;
  members.reserve(motif.ranks.size());
  for (int64_t position : motif.ranks) members.push_back(group.at(static_cast<size_t>(position)));
  const at::Tensor& buffer = submitted.io->buffer;
  if (members.size() == 1) {
    if (motif.kind == MotifKind::AllToAll && motif.ranges[0].second > motif.ranges[0].first &&
        motif.window.second > motif.window.first) {       // every offset is 0: a copy of its own block
      auto [lo, hi] = motif.ranges[0];
      submitted.io->output.select(0, 0).narrow(0, lo, hi - lo).copy_(buffer.select(0, 0).narrow(0, lo, hi - lo));
    }
    return;
  }
  std::vector<int64_t> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  auto found = peers_.find({motif.channel, sorted});
  TORCH_CHECK(found != peers_.end(), "p2enforcer: no channel ", motif.channel, " backend for its motif's ranks");
  const Peers& peers = *found->second;
  if (VCollectives* v = peers.v_collectives()) {          // a UCC channel: one collective per motif
    run_ucc_motif(motif.kind, buffer, submitted.io->output, motif.ranges, motif.window, members, peers.rank(),
                  *peers.backend(), *v);
    return;
  }
  switch (motif.kind) {
    case MotifKind::AllToAll:
      all_to_all(buffer, submitted.io->output, motif.ranges[0], motif.window, members, peers);
      return;
    case MotifKind::ReduceScatter:
      reduce_scatter(parts_of(buffer, motif.ranges), members, peers);
      return;
    case MotifKind::AllGather:
      all_gather(parts_of(buffer, motif.ranges), members, peers);
      return;
    default:
      break;
  }
  auto [lo, hi] = motif.ranges[0];
  at::Tensor data = buffer.narrow(0, lo, hi - lo);
  if (data.numel() == 0) return;
  if (motif.kind == MotifKind::AllReduce) {
    std::vector<at::Tensor> tensors{data};
    peers.backend()->allreduce(tensors)->wait();
  } else if (motif.kind == MotifKind::Reduce) {
    reduce(data, members, peers);
  } else {
    broadcast(data, members, peers);
  }
}

}  // namespace p2
