#include "ucc_backend.hpp"

#include <thread>

#include "op_arguments.hpp"
#include "ucc_error.hpp"
#include "ucc_types.hpp"

namespace p2ucc {

namespace {

using c10d::OpType;

// How long destruction waits for the peers' teardown barrier (UCC's context destroy).
constexpr auto kTeardownBarrier = std::chrono::milliseconds(30000);

}  // namespace

UccBackend::UccBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, ContextOptions options)
    : c10d::Backend(rank, size), timeout_(timeout), engine_(std::make_unique<ProgressEngine>()) {
  context_oob_ = std::make_shared<StoreOob>(store, "ctx", rank, size, timeout);
  team_oob_ = std::make_shared<StoreOob>(store, "team", rank, size, timeout);
  try {
    engine_->call([&] {
      auto context = std::make_shared<Context>(std::make_shared<Lib>(), context_oob_, options);
      try {
        auto team = std::make_shared<Team>(context, team_oob_, rank, size, timeout);
        team->wait();
        team_ = std::move(team);
      } catch (...) {
        context_oob_->abandon();   // no teardown barrier with members that never came
        throw;
      }
    });
  } catch (const std::exception& error) {
    engine_->stop();
    std::string where;
    if (!options.net_devices.empty()) where += " NET_DEVICES=" + options.net_devices;
    if (!options.transports.empty()) where += " TLS=" + options.transports;
    fail("ucc: cannot set up the backend of " + std::to_string(size) + " members" +
         (where.empty() ? "" : " (UCX" + where + ")") + ": " + first_line(error) +
         (where.empty() ? "" : "; is that interface on this host, with an address?"));
  }
}

UccBackend::~UccBackend() {
  release(false);
}

void UccBackend::shutdown() {
  release(false);
}

void UccBackend::abort() {
  release(true);
}

void UccBackend::release(bool abandon_peers) {
  if (!engine_) return;
  try {
    engine_->call([&] {
      engine_->abandon_in_flight("the backend was shut down while it was in flight");
      const bool skip_barrier = abandon_peers || !engine_->broken().empty() || engine_->left_requests_in_ucc();
      if (skip_barrier) {
        context_oob_->abandon();
      } else {
        context_oob_->set_timeout(std::min(timeout_, kTeardownBarrier));
      }
      team_.reset();   // a request left inside UCC keeps the team (and its context) alive
    });
  } catch (const std::exception&) {
    // Released at exit whatever happens; nothing to report to anyone.
  }
  engine_->stop();
  engine_.reset();
}

std::chrono::milliseconds UccBackend::timeout_of(std::chrono::milliseconds op_timeout) const {
  return op_timeout.count() >= 0 ? op_timeout : timeout_;
}

c10::intrusive_ptr<c10d::Work> UccBackend::run(Collective collective, OpType type, std::vector<at::Tensor> outputs,
                                              std::chrono::milliseconds timeout) {
  auto work = c10::make_intrusive<UccWork>(getRank(), type, std::move(outputs));
  if (!engine_) {
    work->fail(error_ptr("ucc " + collective.name + ": the backend was shut down"));
    return work;
  }
  ++collectives_;
  engine_->submit(team_, std::move(collective), work, timeout_of(timeout));
  return work;
}

c10::intrusive_ptr<c10d::Work> UccBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  at::Tensor& tensor = single(tensors, "allreduce");
  Reduction reduction = reduction_for(opts.reduceOp, tensor.scalar_type(), "allreduce");
  at::Tensor buffer = dense(tensor, "allreduce");
  Collective c = p2ucc::allreduce(buffer, reduction, getSize());
  copy_back(c, tensor, buffer);
  return run(std::move(c), OpType::ALLREDUCE, {tensor}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) refuse("ucc allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type() || !t.device().is_cpu()) {
      refuse("ucc allreduce_coalesced: every tensor must be a CPU tensor of dtype " +
             std::string(dtype_name(tensors[0].scalar_type())));
    }
  }
  Reduction reduction = reduction_for(opts.reduceOp, tensors[0].scalar_type(), "allreduce_coalesced");
  at::Tensor flat = flat_cat(tensors);
  Collective c = p2ucc::allreduce(flat, reduction, getSize());
  scatter_back(c, tensors, flat);
  return run(std::move(c), OpType::ALLREDUCE_COALESCED, tensors, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  at::Tensor& tensor = single(tensors, "broadcast");
  at::Tensor buffer = dense(tensor, "broadcast");
  Collective c = p2ucc::broadcast(buffer, static_cast<int>(opts.rootRank));
  copy_back(c, tensor, buffer);
  return run(std::move(c), OpType::BROADCAST, {tensor}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor& tensor = single(tensors, "reduce");
  Reduction reduction = reduction_for(opts.reduceOp, tensor.scalar_type(), "reduce");
  at::Tensor buffer = dense(tensor, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  Collective c = p2ucc::reduce(buffer, reduction, root, getRank(), getSize());
  if (getRank() == root) copy_back(c, tensor, buffer);
  return run(std::move(c), OpType::REDUCE, {tensor}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) {
  at::Tensor& input = single(inputs, "allgather");
  auto& targets = single_list(outputs, getSize(), "allgather", "output tensors");
  require_like(targets, input, "allgather");
  at::Tensor flat = at::empty({input.numel() * getSize()}, input.options());
  Collective c = p2ucc::allgather(dense(input, "allgather").reshape({-1}), flat, getSize());
  scatter_back(c, targets, flat);
  return run(std::move(c), OpType::ALLGATHER, targets, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  require_dtype(input, output, "_allgather_base");
  at::Tensor buffer = dense(output, "_allgather_base");
  Collective c = p2ucc::allgather(dense(input, "_allgather_base"), buffer, getSize());
  copy_back(c, output, buffer);
  return run(std::move(c), OpType::_ALLGATHER_BASE, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  at::Tensor& output = single(outputs, "reduce_scatter");
  auto& sources = single_list(inputs, getSize(), "reduce_scatter", "input tensors");
  require_like(sources, output, "reduce_scatter");
  Reduction reduction = reduction_for(opts.reduceOp, output.scalar_type(), "reduce_scatter");
  at::Tensor buffer = dense(output, "reduce_scatter");
  Collective c = p2ucc::reduce_scatter(flat_cat(sources), buffer.reshape({-1}), reduction, getSize());
  copy_back(c, output, buffer);
  return run(std::move(c), OpType::REDUCE_SCATTER, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::ReduceScatterOptions& opts) {
  require_dtype(input, output, "_reduce_scatter_base");
  Reduction reduction = reduction_for(opts.reduceOp, output.scalar_type(), "_reduce_scatter_base");
  at::Tensor buffer = dense(output, "_reduce_scatter_base");
  Collective c = p2ucc::reduce_scatter(dense(input, "_reduce_scatter_base"), buffer, reduction, getSize());
  copy_back(c, output, buffer);
  return run(std::move(c), OpType::_REDUCE_SCATTER_BASE, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_split_sizes,
                                                         std::vector<int64_t>& input_split_sizes,
                                                         const c10d::AllToAllOptions& opts) {
  require_dtype(input, output, "alltoall_base");
  at::Tensor source = dense(input, "alltoall_base");
  at::Tensor target = dense(output, "alltoall_base");
  Collective c;
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    c = p2ucc::alltoall(source, target, getSize());
  } else {
    auto send = split_counts(input, input_split_sizes, getSize(), "input");
    auto receive = split_counts(output, output_split_sizes, getSize(), "output");
    auto send_at = prefix_sums(send);
    auto receive_at = prefix_sums(receive);
    c = p2ucc::alltoallv(source, target, std::move(send), std::move(send_at), std::move(receive),
                         std::move(receive_at));
  }
  copy_back(c, output, target);
  return run(std::move(c), OpType::ALLTOALL_BASE, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& opts) {
  const size_t n = static_cast<size_t>(getSize());
  if (outputs.size() != n || inputs.size() != n) {
    refuse("ucc alltoall: expected " + std::to_string(n) + " input and output tensors (one per member), got " +
           std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  }
  std::vector<uint64_t> send(n), receive(n);
  for (size_t j = 0; j < n; ++j) {
    require_dtype(inputs[j], inputs[0], "alltoall");
    require_dtype(outputs[j], inputs[0], "alltoall");
    send[j] = static_cast<uint64_t>(inputs[j].numel());
    receive[j] = static_cast<uint64_t>(outputs[j].numel());
  }
  at::Tensor source = flat_cat(inputs);
  at::Tensor target = at::empty({static_cast<int64_t>(prefix_sums(receive).back() + receive.back())},
                                outputs[0].options());
  auto send_at = prefix_sums(send);
  auto receive_at = prefix_sums(receive);
  Collective c = p2ucc::alltoallv(source, target, std::move(send), std::move(send_at), std::move(receive),
                                  std::move(receive_at));
  scatter_back(c, outputs, target);
  return run(std::move(c), OpType::ALLTOALL, outputs, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::barrier(const c10d::BarrierOptions& opts) {
  return run(p2ucc::barrier(), OpType::BARRIER, {}, opts.timeout);
}

void UccBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool /*wait_all_ranks*/) {
  barrier(opts)->wait();
}

c10::intrusive_ptr<c10d::Work> UccBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  at::Tensor& input = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor source = dense(input, "gather").reshape({-1});
  std::vector<at::Tensor> targets;
  at::Tensor flat;
  if (getRank() == root) {
    targets = single_list(outputs, getSize(), "gather", "output tensors");
    require_like(targets, input, "gather");
    flat = at::empty({input.numel() * getSize()}, input.options());
  } else if (!outputs.empty() && !outputs[0].empty()) {
    refuse("ucc gather: only the root passes output tensors");
  }
  Collective c = p2ucc::gather(source, flat, root, getRank(), getSize());
  if (getRank() == root) scatter_back(c, targets, flat);
  return run(std::move(c), OpType::GATHER, targets, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  at::Tensor& output = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (getRank() == root) {
    auto& sources = single_list(inputs, getSize(), "scatter", "input tensors");
    require_like(sources, output, "scatter");
    flat = flat_cat(sources);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    refuse("ucc scatter: only the root passes input tensors");
  }
  at::Tensor buffer = dense(output, "scatter");
  Collective c = p2ucc::scatter(flat, buffer.reshape({-1}), root, getRank(), getSize());
  copy_back(c, output, buffer);
  return run(std::move(c), OpType::SCATTER, {output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::send(std::vector<at::Tensor>&, int, int) {
  refuse("ucc has no point-to-point operations (UCC 1.3.0 offers collectives only): send/recv need a gloo or nccl "
         "backend");
}

c10::intrusive_ptr<c10d::Work> UccBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return send(tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> UccBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return send(tensors, 0, tag);
}

c10::intrusive_ptr<c10d::Work> UccBackend::allgatherv_in_place(const at::Tensor& buffer, std::vector<uint64_t> counts,
                                                               std::vector<uint64_t> displacements) {
  if (counts.size() != static_cast<size_t>(getSize())) refuse("ucc allgatherv: expected one count per member");
  Collective c = p2ucc::allgatherv_in_place(buffer, std::move(counts), std::move(displacements));
  return run(std::move(c), OpType::ALLGATHER, {buffer}, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::reduce_scatterv(const at::Tensor& input, const at::Tensor& output,
                                                           std::vector<uint64_t> counts, const c10d::ReduceOp& op) {
  require_dtype(input, output, "reduce_scatterv");
  Reduction reduction = reduction_for(op, output.scalar_type(), "reduce_scatterv");
  Collective c = p2ucc::reduce_scatterv(input, output, std::move(counts), reduction, getRank(), getSize());
  return run(std::move(c), OpType::REDUCE_SCATTER, {output}, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> UccBackend::alltoallv(const at::Tensor& input, const at::Tensor& output,
                                                     std::vector<uint64_t> send_counts,
                                                     std::vector<uint64_t> send_displacements,
                                                     std::vector<uint64_t> recv_counts,
                                                     std::vector<uint64_t> recv_displacements) {
  require_dtype(input, output, "alltoallv");
  if (send_counts.size() != static_cast<size_t>(getSize())) refuse("ucc alltoallv: expected one count per member");
  Collective c = p2ucc::alltoallv(input, output, std::move(send_counts), std::move(send_displacements),
                                  std::move(recv_counts), std::move(recv_displacements));
  return run(std::move(c), OpType::ALLTOALL, {output}, c10d::kUnsetTimeout);
}

}  // namespace p2ucc
