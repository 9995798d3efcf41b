// Whether *some* stack below could take a suffix after a token leaves a rule at node m
// (sglc/grammar/context_check.py `SomeContext`, whose Python walk is the reference and the
// fallback): the matcher's walk with an open bottom, where a pop past the bottom continues at
// the return node of every call site of the rule. Suffixes no context takes are dropped at compile
// time instead of being checked at every decoding step.
//
// The (exit node, suffix) queries come sorted, so consecutive ones share a prefix: the
// configuration sets after each byte of the previous query are kept and the next query restarts
// after the prefix they share (what the Python side memoizes per prefix).
//
// A configuration is a stack of automaton nodes, top last; the bottom is open.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace {

using Stack = std::vector<int32_t>;
using Configs = std::set<Stack>;

struct Grammar {
    const int32_t* table;         // [N, 256]
    const uint8_t* final;         // [N]
    const uint8_t* has_bytes;     // [N]
    const int32_t* node_rule;     // [N]
    const int64_t* ref_offsets;   // [N + 1]: refs of n
    const int32_t* ref_start;     // callee start node
    const int32_t* ref_return;    // return node
    const int64_t* caller_offsets;  // [R + 1]: return nodes of the call sites of each rule
    const int32_t* caller_return;

    // Every configuration reachable by pushes and pops that sits on a node with byte edges.
    Configs close(const Configs& start) const {
        Configs out, seen(start);
        std::vector<Stack> work(start.begin(), start.end());
        auto add = [&](Stack&& st) {
            if (seen.insert(st).second) work.push_back(std::move(st));
        };
        while (!work.empty()) {
            Stack st = std::move(work.back());
            work.pop_back();
            int32_t n = st.back();
            if (has_bytes[n]) out.insert(st);
            for (int64_t r = ref_offsets[n]; r < ref_offsets[n + 1]; ++r) {
                Stack pushed(st);
                pushed.back() = ref_return[r];
                pushed.push_back(ref_start[r]);
                add(std::move(pushed));
            }
            if (final[n]) {
                if (st.size() > 1) {
                    Stack popped(st.begin(), st.end() - 1);
                    add(std::move(popped));
                } else {
                    int32_t rule = node_rule[n];
                    for (int64_t c = caller_offsets[rule]; c < caller_offsets[rule + 1]; ++c) add(Stack{caller_return[c]});
                }
            }
        }
        return out;
    }

    // The configurations after `byte` (closed); `moved`: some configuration took the byte (the
    // closure may still be empty: the text can end there and nothing follows).
    Configs step(const Configs& configs, uint8_t byte, bool& moved) const {
        Configs next;
        for (const Stack& st : configs) {
            int32_t to = table[static_cast<int64_t>(st.back()) * 256 + byte];
            if (to >= 0) {
                Stack taken(st);
                taken.back() = to;
                next.insert(std::move(taken));
            }
        }
        moved = !next.empty();
        return moved ? close(next) : next;
    }
};

}  // namespace

// For query q: exit node nodes[q], suffix bytes[offsets[q]:offsets[q + 1]] (queries sorted by node,
// then suffix); out[q] = 1 when some context takes the whole suffix.
extern "C" __attribute__((visibility("default"))) void sglc_context_accepts(
    const int32_t* table, const uint8_t* final, const uint8_t* has_bytes, const int32_t* node_rule,
    const int64_t* ref_offsets, const int32_t* ref_start, const int32_t* ref_return, const int64_t* caller_offsets,
    const int32_t* caller_return, const int32_t* nodes, const int64_t* offsets, const uint8_t* bytes,
    int64_t num_queries, uint8_t* out) {
    Grammar g{table, final, has_bytes, node_rule, ref_offsets, ref_start, ref_return, caller_offsets, caller_return};
    // after[i]: the closed configurations after the first i bytes of the previous query; took[i]:
    // whether its byte i - 1 was taken
    std::vector<Configs> after;
    std::vector<uint8_t> took;
    int32_t node = -1;
    const uint8_t* prev = nullptr;
    int64_t prev_len = 0;
    for (int64_t q = 0; q < num_queries; ++q) {
        const uint8_t* suffix = bytes + offsets[q];
        int64_t len = offsets[q + 1] - offsets[q];
        size_t shared = 0;
        if (nodes[q] != node) {
            node = nodes[q];
            after.assign(1, g.close(Configs{Stack{node}}));
            took.assign(1, 1);
        } else {
            while (static_cast<int64_t>(shared) < std::min(len, prev_len) && suffix[shared] == prev[shared]) ++shared;
            shared = std::min(shared, after.size() - 1);
            after.resize(shared + 1);
            took.resize(shared + 1);
        }
        // NOTE: a refused byte ends the walk: nothing after it can be taken
        while (static_cast<int64_t>(after.size()) <= len && took.back()) {
            bool moved = false;
            after.push_back(g.step(after.back(), suffix[after.size() - 1], moved));
            took.push_back(moved);
        }
        out[q] = static_cast<int64_t>(after.size()) > len && took[static_cast<size_t>(len)];
        prev = suffix;
        prev_len = len;
    }
}
