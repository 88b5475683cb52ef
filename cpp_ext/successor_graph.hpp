// A task DAG given as successor lists: the C++ form of scheduler.py's Graph
// (channel, successors, program, topological order), for running the list
// scheduler on any graph the Python side built (the parity tests compare
// Graph.run with it).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "list_scheduler.hpp"

namespace p2 {

class SuccessorGraph {
public:
    SuccessorGraph(const std::vector<int>& channel, const std::vector<std::vector<int>>& successors,
                   const std::vector<int>& program, const std::vector<int>& topological,
                   const std::vector<double>& seconds, const std::map<int, double>& slowdown = {}) {
        const int n = static_cast<int>(channel.size());
        if (successors.size() != channel.size() || program.size() != channel.size() ||
            topological.size() != channel.size() || seconds.size() != channel.size())
            throw InvalidInput("channel, successors, program, topological order and seconds differ in length");
        const std::vector<int> channels = distinct_channels(channel);
        std::vector<int> streams;  // the compute channels, -1 first: stream k
        for (int c : channel)
            if (c < 0) streams.push_back(c);
        std::sort(streams.begin(), streams.end(), std::greater<int>());
        streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
        tasks_.streams = streams.empty() ? 1 : static_cast<int>(streams.size());
        tasks_.resources = static_cast<int>(channels.size()) + 1;
        tasks_.drag = drags_of(channels, slowdown);
        tasks_.seconds = seconds;
        tasks_.program = program;
        tasks_.indegree.assign(n, 0);
        start_.assign(n + 1, 0);
        for (int i = 0; i < n; ++i) {
            const int c = channel[i];
            tasks_.resource.push_back(resource_of(channels, c));
            tasks_.stream.push_back(c < 0 ? static_cast<int>(std::find(streams.begin(), streams.end(), c) -
                                                              streams.begin())
                                          : 0);
            for (int s : successors[i]) {
                if (s < 0 || s >= n) throw InvalidInput("task " + std::to_string(i) + " has no successor " +
                                                        std::to_string(s));
                ++tasks_.indegree[s];
                successor_.push_back(s);
            }
            start_[i + 1] = static_cast<int>(successor_.size());
            if (c >= 0) tasks_.fifo.push_back(i);
        }
        tasks_.lifo = tasks_.fifo;
        std::stable_sort(tasks_.fifo.begin(), tasks_.fifo.end(),
                         [&](int a, int b) { return program[a] < program[b]; });
        std::stable_sort(tasks_.lifo.begin(), tasks_.lifo.end(),
                         [&](int a, int b) { return program[a] > program[b]; });
        std::vector<char> seen(n, 0);
        for (int i : topological) {
            if (i < 0 || i >= n || seen[i]) throw InvalidInput("the topological order is not a permutation of the tasks");
            seen[i] = 1;
        }
        topological_ = topological;
    }

    const TaskArrays& tasks() const { return tasks_; }
    int topological(int k) const { return topological_[k]; }
    template <class F>
    void successors(int task, F&& visit) const {
        for (int k = start_[task]; k < start_[task + 1]; ++k) visit(successor_[k]);
    }

private:
    TaskArrays tasks_;
    std::vector<int> start_, successor_, topological_;
};

}  // namespace p2
