// Motifs as one UCC collective each: the twins of enforcer/runtime/ucc_motifs.py, step
// for step (the same collectives with the same counts and displacements).
#include "ucc_motifs.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace p2 {

namespace {

int64_t index_of(const std::vector<int64_t>& ranks, int64_t rank) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end()) throw std::invalid_argument("rank " + std::to_string(rank) + " is not a member of the motif");
  return it - ranks.begin();
}

// ucc_motifs.run_collective's `[position[r] for r in order]`: the motif position of each team rank.
std::vector<int64_t> positions_in_team_order(const std::vector<int64_t>& members, const std::vector<int64_t>& order) {
  std::vector<int64_t> positions;
  for (int64_t rank : order) positions.push_back(index_of(members, rank));
  return positions;
}

// ucc_motifs._reducible: UCC 1.3.0 reduces no float16 on CPU, so a float16 reduction runs on a float32 copy.
at::Tensor reducible(const at::Tensor& data) {
  return data.scalar_type() == at::kHalf ? data.to(at::kFloat) : data;
}

// ucc_motifs._round_back: the float32 copy's result back into `data`, rounded once.
void round_back(const at::Tensor& data, const at::Tensor& reduced) {
  if (!reduced.is_same(data)) data.copy_(reduced);
}

void ucc_all_reduce(const at::Tensor& data, c10d::Backend& backend) {
  if (!data.numel()) return;
  std::vector<at::Tensor> tensors{reducible(data)};
  backend.allreduce(tensors)->wait();
  round_back(data, tensors[0]);
}

// `order`: sorted(members), the backend's ranks, everywhere below.
void ucc_reduce(const at::Tensor& data, const std::vector<int64_t>& members, const std::vector<int64_t>& order,
                c10d::Backend& backend) {
  if (!data.numel()) return;
  c10d::ReduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  opts.rootRank = index_of(order, members.at(0));
  std::vector<at::Tensor> tensors{reducible(data)};
  backend.reduce(tensors, opts)->wait();
  round_back(data, tensors[0]);
}

void ucc_broadcast(const at::Tensor& data, const std::vector<int64_t>& members, const std::vector<int64_t>& order,
                   c10d::Backend& backend) {
  if (!data.numel()) return;
  c10d::BroadcastOptions opts;
  opts.rootRank = index_of(order, members.at(0));
  std::vector<at::Tensor> tensors{data};
  backend.broadcast(tensors, opts)->wait();
}

void ucc_reduce_scatter(const at::Tensor& buffer, const Ranges& ranges, const std::vector<int64_t>& members,
                        const std::vector<int64_t>& order, int64_t me, VCollectives& backend) {
  std::vector<int64_t> positions = positions_in_team_order(members, order);
  std::vector<at::Tensor> parts;
  std::vector<uint64_t> counts;
  for (int64_t p : positions) {
    auto [lo, hi] = ranges.at(static_cast<size_t>(p));
    parts.push_back(buffer.narrow(0, lo, hi - lo));
    counts.push_back(static_cast<uint64_t>(hi - lo));
  }
  uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
  if (!total) return;
  bool adjacent = true;
  for (size_t t = 0; t + 1 < positions.size(); ++t)
    adjacent = adjacent && ranges[static_cast<size_t>(positions[t])].second ==
                               ranges[static_cast<size_t>(positions[t + 1])].first;
  int64_t start = ranges[static_cast<size_t>(positions[0])].first;
  at::Tensor source = reducible(adjacent ? buffer.narrow(0, start, static_cast<int64_t>(total)) : at::cat(parts));
  size_t mine = static_cast<size_t>(index_of(order, me));
  at::Tensor result = at::empty({static_cast<int64_t>(counts[mine])}, source.options());
  backend.reduce_scatterv(source, result, counts, c10d::ReduceOp::SUM)->wait();
  parts[mine].copy_(result);
}

void ucc_all_gather(const at::Tensor& buffer, const Ranges& ranges, const std::vector<int64_t>& members,
                    const std::vector<int64_t>& order, VCollectives& backend) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t p : positions_in_team_order(members, order)) spans.push_back(ranges.at(static_cast<size_t>(p)));
  int64_t base = -1, end = -1;
  for (auto [lo, hi] : spans)
    if (hi > lo) {
      base = base < 0 ? lo : std::min(base, lo);
      end = std::max(end, hi);
    }
  if (base < 0) return;                                         // every part is empty
  std::vector<uint64_t> counts, displacements;
  for (auto [lo, hi] : spans) {
    counts.push_back(static_cast<uint64_t>(hi - lo));
    displacements.push_back(hi > lo ? static_cast<uint64_t>(lo - base) : 0);
  }
  backend.allgatherv_in_place(buffer.narrow(0, base, end - base), std::move(counts), std::move(displacements))->wait();
}

void ucc_all_to_all(const at::Tensor& inputs, const at::Tensor& outputs, std::pair<int64_t, int64_t> columns,
                    std::pair<int64_t, int64_t> window, const std::vector<int64_t>& members,
                    const std::vector<int64_t>& order, int64_t me, VCollectives& backend) {
  auto [lo, hi] = columns;
  if (hi <= lo) return;
  const int64_t n = static_cast<int64_t>(members.size());
  const int64_t width = inputs.size(1);
  const int64_t i = index_of(members, me);
  std::vector<uint64_t> send_counts(order.size()), send_at(order.size()), recv_counts(order.size()),
      recv_at(order.size());
  bool remote = false;
  for (int64_t offset = window.first; offset < window.second; ++offset) {
    if (offset % n == 0) {
      outputs.select(0, i).narrow(0, lo, hi - lo).copy_(inputs.select(0, i).narrow(0, lo, hi - lo));
      continue;
    }
    remote = true;
    int64_t dst = ((i + offset) % n + n) % n, src = ((i - offset) % n + n) % n;
    size_t to = static_cast<size_t>(index_of(order, members[static_cast<size_t>(dst)]));
    size_t from = static_cast<size_t>(index_of(order, members[static_cast<size_t>(src)]));
    send_counts[to] = static_cast<uint64_t>(hi - lo);
    send_at[to] = static_cast<uint64_t>(dst * width + lo);
    recv_counts[from] = static_cast<uint64_t>(hi - lo);
    recv_at[from] = static_cast<uint64_t>(src * width + lo);
  }
  if (remote)     // the window is the same on every member: all of them call, or none
    backend.alltoallv(inputs.reshape(-1), outputs.view(-1), std::move(send_counts), std::move(send_at),
                      std::move(recv_counts), std::move(recv_at))->wait();
}

}  // namespace

void run_ucc_motif(MotifKind kind, const at::Tensor& buffer, const at::Tensor& output, const Ranges& ranges,
                   std::pair<int64_t, int64_t> window, const std::vector<int64_t>& members, int64_t me,
                   c10d::Backend& backend, VCollectives& v) {
  std::vector<int64_t> order = members;
  std::sort(order.begin(), order.end());
  switch (kind) {
    case MotifKind::AllToAll:
      ucc_all_to_all(buffer, output, ranges.at(0), window, members, order, me, v);
      return;
    case MotifKind::ReduceScatter:
      ucc_reduce_scatter(buffer, ranges, members, order, me, v);
      return;
    case MotifKind::AllGather:
      ucc_all_gather(buffer, ranges, members, order, v);
      return;
    default:
      break;
  }
  auto [lo, hi] = ranges.at(0);
  at::Tensor data = buffer.narrow(0, lo, hi - lo);
  if (kind == MotifKind::AllReduce) ucc_all_reduce(data, backend);
  else if (kind == MotifKind::Reduce) ucc_reduce(data, members, order, backend);
  else ucc_broadcast(data, members, order, backend);
}

}  // namespace p2
