// ProblemGraph (problem_graph.hpp): checking and compiling the problem once,
// laying out the task graph of a choice, and pricing it.
#include "problem_graph.hpp"

#include <algorithm>
#include <utility>

namespace p2 {

namespace {

// Node-level lists: checked against the node count, compressed.
Lists compress(const std::vector<std::vector<int>>& lists, int nodes, const char* what) {
    Lists out;
    for (const auto& list : lists) {
        for (int b : list) {
            if (b < 0 || b >= nodes) throw InvalidInput(std::string(what) + " names node " + std::to_string(b) +
                                                        ", which does not exist");
            out.item.push_back(b);
        }
        out.close();
    }
    return out;
}

// The reverse of node-level predecessor lists (repeats kept).
Lists reverse(const Lists& after, int nodes) {
    std::vector<std::vector<int>> successors(nodes);
    for (int y = 0; y < nodes; ++y)
        for (const int* b = after.begin(y); b != after.end(y); ++b) successors[*b].push_back(y);
    Lists out;
    for (const auto& list : successors) {
        out.item.insert(out.item.end(), list.begin(), list.end());
        out.close();
    }
    return out;
}

Template compile(const TemplateSpec& spec, const std::vector<int>& channels) {
    const auto& [seconds, channel, after, exits] = spec;
    const int n = static_cast<int>(seconds.size());
    if (channel.size() != seconds.size() || after.size() != seconds.size())
        throw InvalidInput("a template's seconds, channel and after differ in length");
    Template t;
    t.seconds = seconds;
    for (int j = 0; j < n; ++j) {
        t.resource.push_back(resource_of(channels, channel[j]));
        t.inner.push_back(static_cast<int>(after[j].size()));
        if (after[j].empty()) t.entries.push_back(j);
        for (int b : after[j])
            if (b < 0 || b >= j) throw InvalidInput("a template task waits for a task that does not come before it");
    }
    t.successors = reverse(compress(after, n, "a template task's predecessor"), n);
    t.exit_count.assign(n, 0);
    for (int e : exits) {
        if (e < 0 || e >= n) throw InvalidInput("a template's exit is not one of its tasks");
        ++t.exit_count[e];
    }
    t.exits = static_cast<int>(exits.size());
    t.motifs = static_cast<int>(std::count_if(t.resource.begin(), t.resource.end(), [](int r) { return r != 0; }));
    return t;
}

}  // namespace

ProblemGraph::ProblemGraph(const std::vector<int>& order, const std::vector<bool>& is_comm,
                           const std::vector<double>& seconds, const std::vector<int>& slot,
                           const std::vector<std::vector<int>>& data_after,
                           const std::vector<std::vector<int>>& issue_after,
                           const std::vector<std::vector<TemplateSpec>>& template_sets,
                           const std::vector<int>& slot_set, int iterations,
                           const std::map<int, double>& slowdown, const std::vector<int>& streams,
                           const std::vector<int>& lanes)
    : order_(order), slot_(slot), slot_set_(slot_set), is_comm_(is_comm.begin(), is_comm.end()), seconds_(seconds),
      iterations_(iterations) {
    const int nodes = static_cast<int>(is_comm.size());
    if (order.size() != is_comm.size() || seconds.size() != is_comm.size() || slot.size() != is_comm.size() ||
        data_after.size() != is_comm.size() || issue_after.size() != is_comm.size())
        throw InvalidInput("the node lists differ in length");
    if (iterations < 1) throw InvalidInput("a problem needs at least one iteration");
    if ((!streams.empty() && streams.size() != is_comm.size()) || (!lanes.empty() && lanes.size() != is_comm.size()))
        throw InvalidInput("the node lists differ in length");
    // Compute streams in use, ascending (the Python scheduler's order), numbered 0..
    std::vector<int> used;
    for (int y = 0; y < nodes; ++y) {
        const int s = streams.empty() ? 0 : streams[y];
        if (s < 0) throw InvalidInput("node " + std::to_string(y) + " has compute stream " + std::to_string(s));
        if (!is_comm[y]) used.push_back(s);
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    stream_.assign(nodes, 0);
    for (int y = 0; y < nodes; ++y)
        if (!is_comm[y] && !streams.empty())
            stream_[y] = static_cast<int>(std::lower_bound(used.begin(), used.end(), streams[y]) - used.begin());
    tasks_.streams = used.empty() ? 1 : static_cast<int>(used.size());
    data_after_ = compress(data_after, nodes, "a data dependency");
    issue_after_ = compress(issue_after, nodes, "a program-order dependency");
    data_successors_ = reverse(data_after_, nodes);
    issue_successors_ = reverse(issue_after_, nodes);

    std::vector<int> position(nodes, -1);
    for (int k = 0; k < nodes; ++k) {
        if (order[k] < 0 || order[k] >= nodes || position[order[k]] >= 0)
            throw InvalidInput("the node order is not a permutation of the nodes");
        position[order[k]] = k;
    }
    for (int y = 0; y < nodes; ++y) {
        for (const Lists* after : {&data_after_, &issue_after_})
            for (const int* b = after->begin(y); b != after->end(y); ++b)
                if (position[*b] >= position[y]) throw InvalidInput("the node order is not topological");
        if (is_comm_[y] && (slot[y] < 0 || slot[y] >= static_cast<int>(slot_set.size())))
            throw InvalidInput("comm node " + std::to_string(y) + " has no slot");
    }
    for (int set : slot_set)
        if (set < 0 || set >= static_cast<int>(template_sets.size())) throw InvalidInput("a slot has no template set");

    std::vector<int> values;
    for (const auto& set : template_sets)
        for (const auto& spec : set) values.insert(values.end(), std::get<1>(spec).begin(), std::get<1>(spec).end());
    const std::vector<int> channels = distinct_channels(std::move(values));
    // Lanes in use, ascending: lane k's channels are resources 1 + k * channels .. (Python sorts lane_channel values)
    std::vector<int> used_lanes;
    for (int y = 0; y < nodes; ++y) {
        const int l = lanes.empty() ? 0 : lanes[y];
        if (l < 0) throw InvalidInput("node " + std::to_string(y) + " has lane " + std::to_string(l));
        if (is_comm[y]) used_lanes.push_back(l);
    }
    std::sort(used_lanes.begin(), used_lanes.end());
    used_lanes.erase(std::unique(used_lanes.begin(), used_lanes.end()), used_lanes.end());
    const int width = static_cast<int>(channels.size());
    const int lane_count = used_lanes.empty() ? 1 : static_cast<int>(used_lanes.size());
    lane_offset_.assign(nodes, 0);
    for (int y = 0; y < nodes; ++y)
        if (is_comm[y] && !lanes.empty())
            lane_offset_[y] = width * static_cast<int>(std::lower_bound(used_lanes.begin(), used_lanes.end(),
                                                                        lanes[y]) - used_lanes.begin());
    tasks_.resources = width * lane_count + 1;
    const std::vector<double> drag = drags_of(channels, slowdown);  // every lane of a channel drags as it does
    tasks_.drag.assign(1, 0.0);
    for (int k = 0; k < lane_count; ++k) tasks_.drag.insert(tasks_.drag.end(), drag.begin() + 1, drag.end());
    for (const auto& set : template_sets) {
        sets_.emplace_back();
        for (const auto& spec : set) sets_.back().push_back(compile(spec, channels));
    }
    slot_template_.resize(slot_set.size());
    chosen_.resize(nodes);
    offset_.resize(nodes);
    tails_.resize(nodes);
}

void ProblemGraph::lay_out(const std::vector<int>& choice, bool framework_order, Policy policy) {
    const int slots = static_cast<int>(slot_set_.size());
    if (static_cast<int>(choice.size()) < slots)
        throw std::out_of_range("the choice has " + std::to_string(choice.size()) + " entries for " +
                                std::to_string(slots) + " comm-ops");
    for (int s = 0; s < slots; ++s) {
        const auto& options = sets_[slot_set_[s]];
        const int count = static_cast<int>(options.size());
        int k = choice[s];
        if (k < 0) k += count;  // as Python indexes the option list
        if (k < 0 || k >= count)
            throw std::out_of_range("comm-op " + std::to_string(s) + " has no option " + std::to_string(choice[s]));
        slot_template_[s] = &options[k];
    }
    framework_order_ = framework_order;
    int size = 0, motifs = 0;
    for (int node : order_) {
        offset_[node] = size;
        const Template* t = is_comm_[node] ? slot_template_[slot_[node]] : nullptr;
        chosen_[node] = t;
        size += t ? static_cast<int>(t->seconds.size()) : 1;
        motifs += t ? t->motifs : 0;
    }
    tasks_.seconds.resize(size);
    tasks_.resource.resize(size);
    tasks_.stream.resize(size);
    tasks_.program.resize(size);
    tasks_.indegree.resize(size);
    for (int node : order_) {
        int before = 0;  // the node's predecessor tasks: the exits of the nodes it waits for
        for (const int* b = data_after_.begin(node); b != data_after_.end(node); ++b) before += tails_[*b];
        if (framework_order)
            for (const int* b = issue_after_.begin(node); b != issue_after_.end(node); ++b) before += tails_[*b];
        const int at = offset_[node];
        const Template* t = chosen_[node];
        if (!t) {
            tails_[node] = 1;
            tasks_.seconds[at] = seconds_[node];
            tasks_.resource[at] = 0;
            tasks_.stream[at] = stream_[node];
            tasks_.program[at] = node;
            tasks_.indegree[at] = before;
            continue;
        }
        tails_[node] = t->exits;
        const int count = static_cast<int>(t->seconds.size());
        std::copy(t->seconds.begin(), t->seconds.end(), tasks_.seconds.begin() + at);
        const int lane = lane_offset_[node];
        for (int j = 0; j < count; ++j) tasks_.resource[at + j] = t->resource[j] + lane;
        std::fill_n(tasks_.program.begin() + at, count, node);
        for (int j = 0; j < count; ++j) tasks_.indegree[at + j] = t->inner[j] ? t->inner[j] : before;
    }
    const int nodes = static_cast<int>(order_.size());
    if (policy == Policy::Fifo) {  // by (program, index)
        tasks_.fifo.resize(motifs);
        int* out = tasks_.fifo.data();
        for (int node = 0; node < nodes; ++node) out = add_motifs(node, out);
    } else if (policy == Policy::Lifo) {  // by (-program, index)
        tasks_.lifo.resize(motifs);
        int* out = tasks_.lifo.data();
        for (int node = nodes - 1; node >= 0; --node) out = add_motifs(node, out);
    }
}

int* ProblemGraph::add_motifs(int node, int* out) const {
    const Template* t = chosen_[node];
    if (!t) return out;
    for (int j = 0; j < static_cast<int>(t->seconds.size()); ++j)
        if (t->resource[j]) *out++ = offset_[node] + j;
    return out;
}

double ProblemGraph::cost(const std::vector<int>& choice, Policy policy, bool framework_order, int capacity) {
    lay_out(choice, framework_order, policy);
    return scheduler_.run(*this, capacity, policy) / iterations_;
}

}  // namespace p2
