// optSched, Syndicate's critical-path list scheduler (Pseudocode 1, §4.3.1):
// the C++ twin of optimizer_service/syndicate/scheduler.py's Graph.run, bit for bit.
//
// Same event-driven reading as the Python module docstring: a task is released
// when its predecessors have ended; compute tasks have resource 0 and each
// runs on its compute stream (TaskArrays::stream: 0, 1, ..., every negative
// channel value is one, -1 first), which takes its released compute tasks
// FIFO by (release, index); a channel (resources 1.., in increasing channel
// value) takes released motifs by its policy key (critical path: minus the
// bottom level; LIFO and FIFO: minus the program index), then index; under
// FIFO motifs instead start strictly in (program, index) order. Of all
// resources the one that can start a task earliest goes first, compute
// before channels, lower streams and lower channels first on ties. Every
// priority ends with the unique task index, so each choice is fully
// determined, and every float is computed by the same operations as in Python
// (sums, and comparisons for max/min), so times are bit-identical.
//
// The scheduler reads a graph through a small interface, so the unrolled
// problem (problem_graph.hpp) and a plain successor-list graph
// (successor_graph.hpp) share it:
//   const TaskArrays& tasks() const;
//   int topological(int k) const;   // the k-th task of a topological order
//   template <class F> void successors(int task, F&& visit) const;
// Successors may repeat (a repeated predecessor counts twice in the
// in-degree, as in Python); their order does not matter.
//
// Interference (Python's "Interference"): a motif on a resource with drag
// s > 0 makes every stream's running compute task progress at 1 / (1 + sum
// of s) while it runs; a compute task's end is an event taken before any
// decision at or after its projected end (the earliest end first, the lower
// stream on ties), and only then releases its successors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "rank_set.hpp"

namespace p2 {

constexpr int kCompute = -1;  // the channel value of compute tasks on stream 0 (every negative value is a stream)

enum class Policy : int { CriticalPath = 0, Lifo = 1, Fifo = 2 };

// Bad input: the Python wrapper turns it into optimizer_service.errors.InvalidInputError.
struct InvalidInput : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The channels among ``values`` (compute streams left out), sorted and once each: channel k is resource k + 1.
inline std::vector<int> distinct_channels(std::vector<int> values) {
    values.erase(std::remove_if(values.begin(), values.end(), [](int c) { return c < 0; }), values.end());
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return values;
}

// The resource of a task on ``channel`` (0: a compute stream), given distinct_channels.
inline int resource_of(const std::vector<int>& channels, int channel) {
    if (channel < 0) return 0;
    return 1 + static_cast<int>(std::lower_bound(channels.begin(), channels.end(), channel) - channels.begin());
}

// Each resource's drag (0 for the compute stream) from channel -> compute
// slowdown; channels left out have none.
inline std::vector<double> drags_of(const std::vector<int>& channels, const std::map<int, double>& slowdown) {
    std::vector<double> drag(channels.size() + 1, 0.0);
    for (std::size_t k = 0; k < channels.size(); ++k) {
        const auto found = slowdown.find(channels[k]);
        if (found == slowdown.end()) continue;
        if (!(found->second >= 0.0) || std::isinf(found->second))
            throw InvalidInput("channel " + std::to_string(channels[k]) + " has compute slowdown " +
                               std::to_string(found->second) + "; it must be a number >= 0");
        drag[k + 1] = found->second;
    }
    return drag;
}

// One task graph as flat arrays, refilled by its owner before each run.
struct TaskArrays {
    std::vector<double> seconds;
    std::vector<int> resource;   // 0: compute, 1..: channels in increasing channel value
    std::vector<int> stream;     // a compute task's stream, 0..streams-1 (motifs: any value)
    std::vector<int> program;    // submission order (FIFO and LIFO keys)
    std::vector<int> indegree;   // predecessors, repeats counted
    std::vector<int> fifo;       // motifs by (program, index): the FIFO issue order (needed for FIFO)
    std::vector<int> lifo;       // motifs by (-program, index): the LIFO priority order (needed for LIFO)
    std::vector<double> drag;    // per resource: how much longer compute takes while one of its motifs runs
    int resources = 1;           // compute plus the channels
    int streams = 1;             // compute streams

    int size() const { return static_cast<int>(seconds.size()); }
};

// The list scheduler with its buffers, reused across runs.
//
// Its queues differ from Graph.run's heaps but yield the same decisions:
// * a compute stream's two heaps order tasks alike, by (release, index), so
//   one heap serves: the stream can start at max(its time, the first
//   release) and then takes the first task;
// * a channel's drain horizons (the times up to which released tasks become
//   ready) never decrease — each is at least the clock, and a channel's
//   earliest free slot only grows — and every decision drains first, so a
//   task released by the last horizon is ready at once; the others wait in
//   groups of equal release (a few: a later release is the end of a task
//   still running, at most one per resource slot);
// * a channel's ready motifs are a RankSet of their rank in the order of the
//   key, then index, which holds for the whole run.
class ListScheduler {
public:
    std::vector<double> start, end;
    std::vector<int> order;

    // Schedules ``graph``; returns the makespan (the last end, 0 for no tasks).
    template <class Graph>
    double run(const Graph& graph, int capacity, Policy policy);

private:
    struct Released {  // a compute task: (release, task), first first
        double release;
        int task;
        bool operator>(const Released& o) const {
            if (release != o.release) return release > o.release;
            return task > o.task;
        }
    };
    struct Pending {  // motifs released at one time, after the channel's last horizon
        double release;
        std::vector<int> tasks;
    };
    // A compute stream's running task under interference (Python's _Computing).
    struct Computing {
        int task = -1;
        double since = 0.0, work = 0.0;            // its base seconds left at ``since``
        std::vector<std::pair<double, double>> motifs;  // (end, drag) of the running motifs that slow it

        void reset() {
            task = -1;
            since = work = 0.0;
            motifs.clear();
        }
        void drop_ended(double now) {
            std::size_t k = 0;
            while (k < motifs.size() && motifs[k].first <= now) ++k;
            if (k) motifs.erase(motifs.begin(), motifs.begin() + static_cast<std::ptrdiff_t>(k));
        }
        void begin(int i, double now, double seconds) {
            drop_ended(now);
            task = i;
            since = now;
            work = seconds;
        }
        void interfere(double now, double end, double drag) {
            if (task >= 0) {
                work = walk(now).second;
                since = now;
            }
            drop_ended(now);
            std::size_t k = motifs.size();
            while (k > 0 && motifs[k - 1].first > end) --k;
            motifs.insert(motifs.begin() + static_cast<std::ptrdiff_t>(k), {end, drag});
        }
        // (time, base seconds left) at ``until`` or at the task's end, whichever is first.
        std::pair<double, double> walk(double until) const {
            double t = since, w = work;
            std::size_t k = 0;
            while (true) {
                while (k < motifs.size() && motifs[k].first <= t) ++k;
                double drag = 0.0;
                for (std::size_t j = k; j < motifs.size(); ++j) drag += motifs[j].second;
                const double stop = k < motifs.size() && motifs[k].first < until ? motifs[k].first : until;
                const double need = w * (1.0 + drag);
                if (need <= stop - t) return {t + need, 0.0};
                w -= (stop - t) / (1.0 + drag);
                if (w < 0.0) w = 0.0;
                t = stop;
                if (t == until) return {t, w};
            }
        }
        double finish() const {  // when the task ends if no further motif starts
            return walk(std::numeric_limits<double>::infinity()).first;
        }
    };
    struct Channel {
        std::vector<double> free;      // when each slot is free
        double horizon = 0.0;          // the last drain's time (the first decision drains up to 0)
        RankSet ready;                 // ranks of the released motifs
        std::vector<Pending> pending;  // groups, the first ``held`` in use
        int held = 0;

        void reset(int capacity, int ranks) {
            free.assign(capacity, 0.0);
            horizon = 0.0;
            ready.reset(ranks);
            held = 0;
        }
        double earliest_free() const {  // min(free): the first minimum
            double m = free[0];
            for (std::size_t k = 1; k < free.size(); ++k)
                if (free[k] < m) m = free[k];
            return m;
        }
        void occupy(double finish) {  // free[free.index(min(free))] = finish
            std::size_t best = 0;
            for (std::size_t k = 1; k < free.size(); ++k)
                if (free[k] < free[best]) best = k;
            free[best] = finish;
        }
        void hold(double release, int task) {
            for (int g = 0; g < held; ++g)
                if (pending[g].release == release) {
                    pending[g].tasks.push_back(task);
                    return;
                }
            if (held == static_cast<int>(pending.size())) pending.emplace_back();
            pending[held].release = release;
            pending[held].tasks.assign(1, task);
            ++held;
        }
        bool first_release(double& release) const {  // the earliest release held back, if any
            if (held == 0) return false;
            release = pending[0].release;
            for (int g = 1; g < held; ++g)
                if (pending[g].release < release) release = pending[g].release;
            return true;
        }
        void drain(double until, const int* rank) {  // motifs released up to ``until`` become ready
            horizon = until;
            for (int g = 0; g < held;) {  // usually none
                if (pending[g].release > until) {
                    ++g;
                    continue;
                }
                for (int task : pending[g].tasks) ready.insert(rank[task]);
                std::swap(pending[g], pending[--held]);
            }
        }
    };

    std::vector<double> key_, release_;
    std::vector<int> waiting_, rank_, by_rank_;
    std::vector<std::uint32_t> bits_, spare_bits_;
    std::vector<int> spare_tasks_;
    std::vector<char> known_;
    std::vector<std::vector<Released>> compute_;  // per stream, a heap
    std::vector<Computing> computing_;           // per stream
    std::vector<double> compute_free_;           // per stream: when it is free
    std::vector<Channel> channels_;              // channel k is resource k + 1

    void rank_motifs(const TaskArrays& tasks, Policy policy);
    void radix_sort();
};

// rank_: each motif's position in the order of its key, then index; by_rank_ the inverse.
inline void ListScheduler::rank_motifs(const TaskArrays& tasks, Policy policy) {
    if (policy == Policy::CriticalPath) {
        // Radix-sort the motifs, taken in index order, by their key rounded to float (rounding
        // never reverses an order; the sort is stable), then order each run of equal floats by
        // the exact key.
        bits_.clear();
        by_rank_.clear();
        for (int i = 0; i < tasks.size(); ++i) {
            if (!tasks.resource[i]) continue;
            const float key = static_cast<float>(key_[i]) + 0.0f;  // -0.0 ranks as 0.0
            std::uint32_t bits;
            std::memcpy(&bits, &key, sizeof bits);
            bits_.push_back(bits >> 31 ? ~bits : bits | 0x80000000u);  // ordered as unsigned
            by_rank_.push_back(i);
        }
        radix_sort();
        const double* key = key_.data();
        for (std::size_t k = 1; k < by_rank_.size(); ++k)  // insertion sort within runs (stable)
            for (std::size_t j = k; j > 0 && bits_[j - 1] == bits_[j] && key[by_rank_[j - 1]] > key[by_rank_[j]]; --j)
                std::swap(by_rank_[j - 1], by_rank_[j]);
    } else {
        by_rank_ = tasks.lifo;
    }
    rank_.resize(tasks.size());
    for (int k = 0; k < static_cast<int>(by_rank_.size()); ++k) rank_[by_rank_[k]] = k;
}

// by_rank_ stably by bits_, a byte at a time (a byte all motifs share is skipped).
inline void ListScheduler::radix_sort() {
    const std::size_t n = bits_.size();
    std::uint32_t count[4][256] = {};
    for (const std::uint32_t b : bits_)
        for (int d = 0; d < 4; ++d) ++count[d][(b >> (8 * d)) & 255];
    spare_bits_.resize(n);
    spare_tasks_.resize(n);
    for (int d = 0; d < 4; ++d) {
        if (n == 0 || count[d][(bits_[0] >> (8 * d)) & 255] == n) continue;
        std::uint32_t at[256], sum = 0;
        for (int v = 0; v < 256; ++v) {
            at[v] = sum;
            sum += count[d][v];
        }
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t slot = at[(bits_[k] >> (8 * d)) & 255]++;
            spare_bits_[slot] = bits_[k];
            spare_tasks_[slot] = by_rank_[k];
        }
        bits_.swap(spare_bits_);
        by_rank_.swap(spare_tasks_);
    }
}

template <class Graph>
double ListScheduler::run(const Graph& graph, int capacity, Policy policy) {
    if (capacity < 1)
        throw InvalidInput("channel capacity " + std::to_string(capacity) + " must be at least 1");
    const TaskArrays& tasks = graph.tasks();
    const int n = tasks.size();
    const double* seconds = tasks.seconds.data();
    const int* resource = tasks.resource.data();
    const int* stream = tasks.stream.data();
    const int streams = tasks.streams;
    const double* drag = tasks.drag.empty() ? nullptr : tasks.drag.data();
    const bool fifo = policy == Policy::Fifo;

    // The channel key: minus the bottom level (duration plus the longest chain
    // of successors), or minus the program index.
    key_.resize(n);
    double* key = key_.data();
    if (policy == Policy::CriticalPath) {
        for (int k = n - 1; k >= 0; --k) {
            const int i = graph.topological(k);
            double best = 0.0;
            graph.successors(i, [&](int s) {
                if (-key[s] > best) best = -key[s];
            });
            key[i] = -(seconds[i] + best);
        }
    } else {
        for (int i = 0; i < n; ++i) key[i] = -static_cast<double>(tasks.program[i]);
    }
    if (!fifo) rank_motifs(tasks, policy);

    waiting_.assign(tasks.indegree.begin(), tasks.indegree.end());
    release_.assign(n, 0.0);
    known_.assign(n, 0);
    start.assign(n, 0.0);
    end.assign(n, 0.0);
    order.clear();
    compute_.resize(streams);
    for (auto& heap : compute_) heap.clear();
    computing_.resize(streams);
    for (Computing& c : computing_) c.reset();
    compute_free_.assign(streams, 0.0);
    int running = 0;  // streams with a task
    channels_.resize(tasks.resources - 1);
    for (Channel& channel : channels_) channel.reset(capacity, static_cast<int>(by_rank_.size()));
    Channel* channels = channels_.data();
    double* release = release_.data();
    int* waiting = waiting_.data();
    const int* rank = rank_.data();
    const std::vector<int>& fifo_order = tasks.fifo;

    auto arrive = [&](int i) {
        const int r = resource[i];
        if (r == 0) {
            auto& heap = compute_[stream[i]];
            heap.push_back({release[i], i});
            std::push_heap(heap.begin(), heap.end(), std::greater<Released>());
        } else if (fifo) {
            known_[i] = 1;
        } else if (release[i] <= channels[r - 1].horizon) {
            channels[r - 1].ready.insert(rank[i]);
        } else {
            channels[r - 1].hold(release[i], i);
        }
    };

    for (int i = 0; i < n; ++i)
        if (waiting[i] == 0) arrive(i);
    std::size_t head = 0;
    double last_issue = 0.0, clock = 0.0, makespan = 0.0;
    const int scanned = fifo ? 0 : static_cast<int>(channels_.size());  // under FIFO they follow the issue order
    auto ended = [&](int i, double finish) {
        graph.successors(i, [&](int s) {
            if (finish > release[s]) release[s] = finish;
            if (--waiting[s] == 0) arrive(s);
        });
    };
    for (int done = 0; done < n || running > 0;) {
        bool found = false;
        double best_time = 0.0;
        int best_resource = -1, best_stream = -1;
        for (int s = 0; s < streams; ++s) {
            if (compute_[s].empty() || computing_[s].task >= 0) continue;
            const double now = compute_free_[s] < clock ? clock : compute_free_[s];
            const double first = compute_[s].front().release;
            const double t = first <= now ? now : first;
            if (!found || t < best_time) {
                found = true;
                best_time = t;
                best_resource = 0;
                best_stream = s;
            }
        }
        for (int c = 0; c < scanned; ++c) {
            Channel& channel = channels[c];
            double now = channel.earliest_free();
            if (now < clock) now = clock;
            channel.drain(now, rank);
            double t;
            if (!channel.ready.empty())
                t = now;
            else if (!channel.first_release(t))
                continue;
            if (!found || t < best_time) {
                found = true;
                best_time = t;
                best_resource = c + 1;
            }
        }
        if (fifo && head < fifo_order.size() && known_[fifo_order[head]]) {
            const int i = fifo_order[head];
            double t = release[i];  // max(release, min(slots), last_issue, clock)
            const double slot = channels[resource[i] - 1].earliest_free();
            if (slot > t) t = slot;
            if (last_issue > t) t = last_issue;
            if (clock > t) t = clock;
            if (!found || t < best_time) {
                found = true;
                best_time = t;
                best_resource = -2;
            }
        }
        if (running > 0) {
            int first = -1;
            double finish = 0.0;
            for (int s = 0; s < streams; ++s) {
                if (computing_[s].task < 0) continue;
                const double f = computing_[s].finish();
                if (first < 0 || f < finish) {
                    first = s;
                    finish = f;
                }
            }
            if (!found || finish <= best_time) {  // it ends first: release what waits for it
                const int i = computing_[first].task;
                computing_[first].task = -1;
                --running;
                end[i] = finish;
                if (finish > makespan) makespan = finish;
                compute_free_[first] = finish;
                ended(i, finish);
                continue;
            }
        }
        if (!found)
            throw InvalidInput("no task can start: the FIFO order waits for a motif whose "
                               "predecessors come after it in submission order");
        int i;
        if (best_resource == 0) {
            auto& heap = compute_[best_stream];
            std::pop_heap(heap.begin(), heap.end(), std::greater<Released>());
            i = heap.back().task;
            heap.pop_back();
        } else if (best_resource == -2) {
            i = fifo_order[head++];
            last_issue = best_time;
        } else {
            Channel& channel = channels[best_resource - 1];
            channel.drain(best_time, rank);  // it may start a task released only now
            i = by_rank_[channel.ready.take_smallest()];
        }
        clock = best_time;
        start[i] = best_time;
        order.push_back(i);
        ++done;
        const int r = resource[i];
        if (r == 0) {
            computing_[stream[i]].begin(i, best_time, seconds[i]);
            ++running;
            continue;
        }
        const double finish = best_time + seconds[i];
        end[i] = finish;
        if (finish > makespan) makespan = finish;
        channels[r - 1].occupy(finish);
        if (drag != nullptr && drag[r] > 0.0)
            for (Computing& c : computing_) c.interfere(best_time, finish, drag[r]);
        ended(i, finish);
    }
    return makespan;
}

}  // namespace p2
