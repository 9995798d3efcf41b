// Moore partition refinement of one rule's DFA (sglc/grammar/rule_automaton.py `minimize`; its
// numpy loop is the reference and the fallback). A chain of literal bytes takes a round per byte,
// and a round in Python hashed every row's signature: the loop is here, the renumbering stays there.
//
// moves: [n, k] targets per distinguishing symbol (-1: none); block: [n] in: the initial
// partition (final or not), out: the coarsest stable refinement (ids in first-seen order).
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

extern "C" __attribute__((visibility("default"))) int64_t sglc_moore_refine(const int64_t* moves, int64_t n, int64_t k,
                                                                             int64_t* block) {
    std::vector<int64_t> sig(static_cast<size_t>(k) + 1), next(static_cast<size_t>(n));
    int64_t count = -1;
    while (true) {
        std::map<std::vector<int64_t>, int64_t> ids;
        for (int64_t i = 0; i < n; ++i) {
            sig[0] = block[i];
            for (int64_t j = 0; j < k; ++j) {
                int64_t to = moves[i * k + j];
                sig[static_cast<size_t>(j) + 1] = to < 0 ? -1 : block[to];
            }
            auto it = ids.emplace(sig, static_cast<int64_t>(ids.size())).first;
            next[static_cast<size_t>(i)] = it->second;
        }
        int64_t now = static_cast<int64_t>(ids.size());
        for (int64_t i = 0; i < n; ++i) block[i] = next[static_cast<size_t>(i)];
        if (now == count) return now;
        count = now;
    }
}
