// The joint optimizer's cost function in C++ (Syndicate Pseudocode 1 line 6,
// §4.3.1): the twin of optimizer_service/syndicate/problem.py's Problem.graph and
// Problem.cost_of.
//
// Built once per Problem from plain lists: the unrolled DAG's nodes in a
// topological order, each node's compute seconds and stream or comm slot and
// lane, its data and program-order predecessors, and every slot's options lowered to templates
// (tasks with local indices). Slots that share an option list (Problem
// dedups them by op) share one template set here too. cost(choice, ...)
// then lays out the task graph exactly as Problem.graph does — same task
// indices (nodes in the given order, a comm-op's template tasks in local
// order), same program values (the unrolled node index), same predecessors
// (a template task waits for its predecessors inside the op, or, with none,
// for the exits of the node's data predecessors, plus its program-order
// predecessors with framework_order; a motif of lane l on channel c on the
// resource of Python's lane_channel(c, l): the lanes in increasing order, each
// with every channel) — and runs the list scheduler on it.
// Successors are not stored per task: they follow from the templates and the
// node-level successor lists.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "list_scheduler.hpp"

namespace p2 {

// One option of one comm-op as the Python side gives it (syndicate.problem.Template):
// (seconds, channel, after, exits) with local task indices.
using TemplateSpec =
    std::tuple<std::vector<double>, std::vector<int>, std::vector<std::vector<int>>, std::vector<int>>;

// Compressed lists: the items of list k are item[start[k] .. start[k+1]).
struct Lists {
    std::vector<int> start{0}, item;
    void close() { start.push_back(static_cast<int>(item.size())); }
    const int* begin(int k) const { return item.data() + start[k]; }
    const int* end(int k) const { return item.data() + start[k + 1]; }
};

// A template with what laying it out needs (local task indices).
struct Template {
    std::vector<double> seconds;
    std::vector<int> resource;
    std::vector<int> inner;       // predecessors inside the op (0: the task waits for the op's predecessors)
    std::vector<int> entries;     // the tasks with no predecessor inside the op
    std::vector<int> exit_count;  // how often each task is listed among the exits
    Lists successors;             // successors inside the op
    int exits = 0;                // the length of the exit list
    int motifs = 0;               // the tasks on a channel
};

class ProblemGraph {
public:
    ProblemGraph(const std::vector<int>& order, const std::vector<bool>& is_comm, const std::vector<double>& seconds,
                 const std::vector<int>& slot, const std::vector<std::vector<int>>& data_after,
                 const std::vector<std::vector<int>>& issue_after,
                 const std::vector<std::vector<TemplateSpec>>& template_sets, const std::vector<int>& slot_set,
                 int iterations, const std::map<int, double>& slowdown = {},
                 const std::vector<int>& streams = {}, const std::vector<int>& lanes = {});

    // The iteration time of ``choice`` (one option index per slot): makespan / iterations.
    double cost(const std::vector<int>& choice, Policy policy, bool framework_order, int capacity);

    // The scheduler's view of the graph laid out by the last cost().
    const TaskArrays& tasks() const { return tasks_; }
    int topological(int k) const { return k; }  // predecessors come first
    template <class F>
    void successors(int task, F&& visit) const {
        const int node = tasks_.program[task];  // a task's program is its node
        const Template* t = chosen_[node];
        int times = 1;
        if (t) {
            const int base = offset_[node], local = task - base;
            for (const int* s = t->successors.begin(local); s != t->successors.end(local); ++s) visit(base + *s);
            times = t->exit_count[local];
        }
        for (; times > 0; --times) {
            for (const int* y = data_successors_.begin(node); y != data_successors_.end(node); ++y) entries(*y, visit);
            if (framework_order_)
                for (const int* y = issue_successors_.begin(node); y != issue_successors_.end(node); ++y)
                    entries(*y, visit);
        }
    }

private:
    template <class F>
    void entries(int node, F&& visit) const {
        const Template* t = chosen_[node];
        if (!t) {
            visit(offset_[node]);
            return;
        }
        for (int e : t->entries) visit(offset_[node] + e);
    }
    void lay_out(const std::vector<int>& choice, bool framework_order, Policy policy);
    int* add_motifs(int node, int* out) const;  // the node's motifs in index order

    // the problem
    std::vector<int> order_, slot_, slot_set_;
    std::vector<int> stream_;  // per node: its compute stream's position among the streams used (Graph.streams)
    std::vector<int> lane_offset_;  // per comm node: added to its motifs' resources (its lane's position x channels)
    std::vector<char> is_comm_;
    std::vector<double> seconds_;
    Lists data_after_, issue_after_, data_successors_, issue_successors_;
    std::vector<std::vector<Template>> sets_;
    int iterations_;
    // the last layout, and buffers reused across calls
    bool framework_order_ = false;
    std::vector<const Template*> slot_template_, chosen_;
    std::vector<int> offset_, tails_;
    TaskArrays tasks_;
    ListScheduler scheduler_;
};

}  // namespace p2
