// The motifs of a plan over an inner backend's send and recv: the twins of
// enforcer/comm/sendrecv.py. Each function below follows its Python namesake step for
// step — the same rounds, the same tags, receives posted before sends in the
// same order, nothing sent for an empty part — so a C++ rank and a Python
// rank can run one motif together and the sums come out in the same order
// (bit-identical results).
#include "motifs.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace p2 {

namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Python's `a % b` for b > 0: never negative, so ring arithmetic reads as in enforcer/comm/sendrecv.py.
int64_t wrap(int64_t a, int64_t b) { return ((a % b) + b) % b; }

std::string ranks_text(const std::vector<int64_t>& members) {
  std::ostringstream out;
  out << '[';
  for (size_t k = 0; k < members.size(); ++k) out << (k ? ", " : "") << members[k];
  out << ']';
  return out.str();
}

// sendrecv._position: where `rank` stands in `members`.
int64_t position(const std::vector<int64_t>& members, int64_t rank) {
  auto it = std::find(members.begin(), members.end(), rank);
  if (it == members.end())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is not a member of " + ranks_text(members));
  return it - members.begin();
}

// sendrecv._ring's checks: one part per member, and this rank among them.
int64_t ring_position(const char* what, const std::vector<at::Tensor>& parts, const std::vector<int64_t>& members,
                      const Peers& peers) {
  if (parts.size() != members.size())
    throw std::invalid_argument(std::string(what) + " needs one part per member (" + std::to_string(members.size()) +
                                "), got " + std::to_string(parts.size()));
  return position(members, peers.rank());
}

void wait_all(const std::vector<WorkPtr>& works) {
  for (const auto& work : works) work->wait();
}

// sendrecv._exchange: the receive is posted first; an absent or empty side is skipped.
void exchange(const at::Tensor* send, int64_t dst, const at::Tensor* recv, int64_t src, const Peers& peers, int tag) {
  std::vector<WorkPtr> works;
  if (recv != nullptr && recv->numel()) works.push_back(peers.irecv(*recv, src, tag));
  if (send != nullptr && send->numel()) works.push_back(peers.isend(*send, dst, tag));
  wait_all(works);
}

// sendrecv._segments: the chain's pieces along dim 0, `segment_bytes` each (at least one element).
std::vector<at::Tensor> segments(const at::Tensor& buffer, int64_t segment_bytes) {
  if (!buffer.numel()) return {};
  int64_t per = std::max<int64_t>(1, segment_bytes / std::max<int64_t>(1, buffer.element_size()));
  return buffer.split(per);
}

}  // namespace

Peers::Peers(c10::intrusive_ptr<c10d::Backend> backend, std::vector<int64_t> members, int64_t rank,
             VCollectives* v_collectives)
    : backend_(std::move(backend)), members_(std::move(members)), rank_(rank), v_collectives_(v_collectives) {
  if (!backend_) throw std::invalid_argument("Peers: no backend given");
  if (backend_->getSize() != static_cast<int>(members_.size()))
    throw std::invalid_argument("Peers: the backend has " + std::to_string(backend_->getSize()) + " ranks but " +
                                ranks_text(members_) + " names " + std::to_string(members_.size()) +
                                "; make the backend for exactly these members");
}

WorkPtr Peers::isend(const at::Tensor& tensor, int64_t peer, int tag) const {
  std::vector<at::Tensor> tensors{tensor};
  return backend_->send(tensors, static_cast<int>(position(members_, peer)), tag);
}

WorkPtr Peers::irecv(const at::Tensor& tensor, int64_t peer, int tag) const {
  std::vector<at::Tensor> tensors{tensor};
  return backend_->recv(tensors, static_cast<int>(position(members_, peer)), tag);
}

void reduce_scatter(const std::vector<at::Tensor>& parts, const std::vector<int64_t>& members, const Peers& peers) {
  const int64_t p = static_cast<int64_t>(members.size());
  const int64_t i = ring_position("reduce_scatter", parts, members, peers);
  const int64_t right = members[wrap(i + 1, p)], left = members[wrap(i - 1, p)];
  int64_t largest = 0;
  for (const auto& part : parts) largest = std::max<int64_t>(largest, part.numel());
  at::Tensor scratch = at::empty({largest}, parts[i].options());
  for (int64_t s = 0; s < p - 1; ++s) {
    const at::Tensor& outgoing = parts[wrap(i - s - 1, p)];
    const at::Tensor& incoming = parts[wrap(i - s - 2, p)];
    at::Tensor received = scratch.slice(0, 0, incoming.numel());
    exchange(&outgoing, right, &received, left, peers, static_cast<int>(s));
    if (incoming.numel()) incoming.add_(received);
  }
}

void all_gather(const std::vector<at::Tensor>& parts, const std::vector<int64_t>& members, const Peers& peers) {
  const int64_t p = static_cast<int64_t>(members.size());
  const int64_t i = ring_position("all_gather", parts, members, peers);
  const int64_t right = members[wrap(i + 1, p)], left = members[wrap(i - 1, p)];
  for (int64_t s = 0; s < p - 1; ++s)
    exchange(&parts[wrap(i - s, p)], right, &parts[wrap(i - s - 1, p)], left, peers, static_cast<int>(s));
}

void reduce(const at::Tensor& buffer, const std::vector<int64_t>& members, const Peers& peers,
            int64_t segment_bytes) {
  const int64_t p = static_cast<int64_t>(members.size());
  const int64_t i = position(members, peers.rank());
  const std::vector<at::Tensor> pieces = segments(buffer, segment_bytes);
  const bool has_downstream = i > 0, has_upstream = i < p - 1;     // downstream: towards the root
  const int64_t downstream = has_downstream ? members[i - 1] : -1;
  const int64_t upstream = has_upstream ? members[i + 1] : -1;
  std::vector<at::Tensor> scratch;
  if (has_upstream)
    for (const auto& piece : pieces) scratch.push_back(at::empty_like(piece));
  std::vector<WorkPtr> sends;
  WorkPtr pending = scratch.empty() ? WorkPtr() : peers.irecv(scratch[0], upstream, 0);
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (pending) {
      pending->wait();
      pending = k + 1 < pieces.size() ? peers.irecv(scratch[k + 1], upstream, static_cast<int>(k + 1)) : WorkPtr();
      pieces[k].add_(scratch[k]);
    }
    if (has_downstream) sends.push_back(peers.isend(pieces[k], downstream, static_cast<int>(k)));
  }
  wait_all(sends);
}

void broadcast(const at::Tensor& buffer, const std::vector<int64_t>& members, const Peers& peers,
               int64_t segment_bytes) {
  const int64_t p = static_cast<int64_t>(members.size());
  const int64_t i = position(members, peers.rank());
  const std::vector<at::Tensor> pieces = segments(buffer, segment_bytes);
  const bool has_upstream = i > 0, has_downstream = i < p - 1;     // upstream: towards the root
  std::vector<WorkPtr> receives;
  if (has_upstream)
    for (size_t k = 0; k < pieces.size(); ++k)
      receives.push_back(peers.irecv(pieces[k], members[i - 1], static_cast<int>(k)));
  std::vector<WorkPtr> sends;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (!receives.empty()) receives[k]->wait();
    if (has_downstream) sends.push_back(peers.isend(pieces[k], members[i + 1], static_cast<int>(k)));
  }
  wait_all(sends);
}

void all_to_all(const at::Tensor& inputs, const at::Tensor& outputs, std::pair<int64_t, int64_t> columns,
                std::pair<int64_t, int64_t> window, const std::vector<int64_t>& members, const Peers& peers) {
  const int64_t n = static_cast<int64_t>(members.size());
  const int64_t i = position(members, peers.rank());
  const auto [lo, hi] = columns;
  if (hi <= lo) return;
  struct Pending {
    WorkPtr work;
    int64_t source;          // the block a receive lands in; -1 for a send
    at::Tensor received;
  };
  std::vector<Pending> works;
  for (int64_t offset = window.first; offset < window.second; ++offset) {
    const int64_t dst = wrap(i + offset, n), src = wrap(i - offset, n);
    if (wrap(offset, n) == 0) {
      outputs.select(0, i).slice(0, lo, hi).copy_(inputs.select(0, i).slice(0, lo, hi));
      continue;
    }
    at::Tensor received = at::empty({hi - lo}, outputs.options());
    works.push_back({peers.irecv(received, members[src], static_cast<int>(offset)), src, received});
    works.push_back({peers.isend(inputs.select(0, dst).slice(0, lo, hi).contiguous(), members[dst],
                                 static_cast<int>(offset)), -1, at::Tensor()});
  }
  for (auto& pending : works) {
    pending.work->wait();
    if (pending.source >= 0) outputs.select(0, pending.source).slice(0, lo, hi).copy_(pending.received);
  }
}

}  // namespace p2
