// The dispatcher's decisions, as a pure function: the twin of enforcer/runtime/dispatch.py
// (Syndicate Pseudocode 2, §4.4; read its docstring for the rules — plan order
// over slots, waits counted only while ready work is held back, promotion of an
// op the program waits on, skipping ops that never came once the iteration is
// closed). No threads, no clock: the current time is an argument.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace p2::dispatch {

// Waits at most this long (seconds) are not reported (enforcer.runtime.dispatch.MIN_WAIT).
constexpr double kMinWait = 1e-5;

struct Slot {
  int64_t order;
  int op;
  int motif;
};

struct Schedule {
  std::vector<std::vector<int64_t>> orders;   // per op, per motif: its order number
  std::vector<Slot> slots;                    // every motif, in plan order (order, op, motif)

  static Schedule of(std::vector<std::vector<int64_t>> orders);
  std::vector<int> in_order(int op) const;    // op's motifs sorted by order number (ties: motif index)
};

// What the dispatcher reads of one submitted op.
struct OpView {
  int op;                                     // plan op index
  int dispatched;                             // motifs handed over so far
  const std::vector<bool>* handed;            // per motif: handed over
  bool waited;                                // the program called wait() on it
};

// What it reads of the iteration: submitted ops in submission order, and whether it is closed.
struct IterationView {
  std::vector<OpView> ops;
  bool closed = false;
  const OpView* find(int op) const;
};

struct Cursor {
  size_t position = 0;
  std::optional<double> since;
};

struct Step {
  Cursor cursor;
  std::vector<std::pair<int, int>> hand_over;         // (op, motif), in this order
  std::optional<int> missing;
  std::optional<std::pair<int64_t, double>> waited;   // (order, seconds)
  bool blocked = false;
  bool finished = false;
};

Step next_step(const Schedule& schedule, const Cursor& cursor, const IterationView& iteration, double now);

}  // namespace p2::dispatch
