// A set of ranks 0..n-1 with constant-time insert and take-the-smallest: a
// bitmap with one summary level per 64 words, all levels in one array. The
// list scheduler keeps each channel's released motifs in one, ranked by their
// policy key, instead of a binary heap whose sift branches cannot be predicted.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace p2 {

class RankSet {
public:
    // Empties the set and makes room for ranks 0..n-1 (n < 2^31: at most 6 levels).
    void reset(int n) {
        std::size_t words = (static_cast<std::size_t>(n) + 63) / 64, total = 0;
        for (top_ = 0;; ++top_) {
            words = words ? words : 1;
            start_[top_] = total;
            total += words;
            if (words == 1) break;
            words = (words + 63) / 64;
        }
        bits_.assign(total, 0);
    }
    bool empty() const { return bits_[start_[top_]] == 0; }
    void insert(int rank) {
        std::size_t x = static_cast<std::size_t>(rank);
        for (std::size_t k = 0; k <= top_; ++k, x >>= 6) bits_[start_[k] + (x >> 6)] |= std::uint64_t{1} << (x & 63);
    }
    // Removes and returns the smallest rank; the set must not be empty.
    int take_smallest() {
        std::size_t x = 0;
        for (std::size_t k = top_ + 1; k-- > 0;)
            x = (x << 6) | static_cast<std::size_t>(__builtin_ctzll(bits_[start_[k] + x]));
        const int rank = static_cast<int>(x);
        for (std::size_t k = 0; k <= top_; ++k, x >>= 6) {
            std::uint64_t& word = bits_[start_[k] + (x >> 6)];
            word &= ~(std::uint64_t{1} << (x & 63));
            if (word) break;
        }
        return rank;
    }

private:
    std::size_t top_ = 0;                  // the summary level, one word
    std::array<std::size_t, 8> start_{};   // where each level's words begin
    std::vector<std::uint64_t> bits_;      // level 0: the ranks; level k + 1: the nonzero words of level k
};

}  // namespace p2
