#include "dispatch.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace p2::dispatch {

Schedule Schedule::of(std::vector<std::vector<int64_t>> orders) {
  Schedule schedule;
  schedule.orders = std::move(orders);
  for (size_t op = 0; op < schedule.orders.size(); ++op)
    for (size_t m = 0; m < schedule.orders[op].size(); ++m)
      schedule.slots.push_back(Slot{schedule.orders[op][m], static_cast<int>(op), static_cast<int>(m)});
  std::sort(schedule.slots.begin(), schedule.slots.end(), [](const Slot& a, const Slot& b) {
    return std::tie(a.order, a.op, a.motif) < std::tie(b.order, b.op, b.motif);
  });
  return schedule;
}

std::vector<int> Schedule::in_order(int op) const {
  const auto& order = orders[static_cast<size_t>(op)];
  std::vector<int> motifs(order.size());
  std::iota(motifs.begin(), motifs.end(), 0);
  std::stable_sort(motifs.begin(), motifs.end(),
                   [&](int a, int b) { return order[static_cast<size_t>(a)] < order[static_cast<size_t>(b)]; });
  return motifs;
}

const OpView* IterationView::find(int op) const {
  for (const auto& view : ops)
    if (view.op == op) return &view;
  return nullptr;
}

namespace {

bool incomplete(const Schedule& schedule, const OpView& view) {
  return static_cast<size_t>(view.dispatched) < schedule.orders[static_cast<size_t>(view.op)].size();
}

// The first submitted op (submission order) the program waits on whose motifs are not all handed over.
const OpView* promoted(const Schedule& schedule, const IterationView& iteration) {
  for (const auto& view : iteration.ops)
    if (view.waited && incomplete(schedule, view)) return &view;
  return nullptr;
}

// Whether an op other than `waiting_for` came and has motifs not handed over.
bool holds_back(const Schedule& schedule, const IterationView& iteration, int waiting_for) {
  return std::any_of(iteration.ops.begin(), iteration.ops.end(),
                     [&](const OpView& view) { return view.op != waiting_for && incomplete(schedule, view); });
}

}  // namespace

Step next_step(const Schedule& schedule, const Cursor& cursor, const IterationView& iteration, double now) {
  Step step;
  step.cursor = cursor;
  if (cursor.position >= schedule.slots.size()) {
    (iteration.closed ? step.finished : step.blocked) = true;
    return step;
  }
  const Slot& slot = schedule.slots[cursor.position];
  const OpView* submitted = iteration.find(slot.op);
  std::optional<double> since = cursor.since;
  if (!since && submitted == nullptr && holds_back(schedule, iteration, slot.op)) since = now;
  if (submitted == nullptr) {
    if (const OpView* waiting = promoted(schedule, iteration)) {
      step.cursor = Cursor{cursor.position, since};
      for (int m : schedule.in_order(waiting->op))
        if (!(*waiting->handed)[static_cast<size_t>(m)]) step.hand_over.emplace_back(waiting->op, m);
      return step;
    }
    if (!iteration.closed) {
      step.cursor = Cursor{cursor.position, since};
      step.blocked = true;
      return step;
    }
  }
  double waited = since ? now - *since : 0.0;
  step.cursor = Cursor{cursor.position + 1, std::nullopt};
  if (waited > kMinWait) step.waited = std::make_pair(slot.order, waited);
  if (submitted == nullptr) {
    step.missing = slot.op;
    return step;
  }
  if (!(*submitted->handed)[static_cast<size_t>(slot.motif)]) step.hand_over.emplace_back(slot.op, slot.motif);
  return step;
}

}  // namespace p2::dispatch
