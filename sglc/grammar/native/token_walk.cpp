// The token classification walk of sglc/grammar/token_masks.py in C++ (its numpy version is the
// reference and the fallback; both give the same classes).
//
// For each position (an automaton node with byte edges) a depth-first walk of the vocabulary's
// prefix trie carries the set of configurations (automaton node, inner stack) the bytes so far
// lead to. The trie comes in preorder, so the walk is a forward scan that jumps over the subtree
// of a node no configuration reaches (cache-friendly: a recursive walk over the breadth-first
// arrays missed the cache at most nodes). At each trie node below the root the set is closed first: a node's rule references
// push the callee's start with the return node on an inner stack (interned: id -> (return
// node, parent id), -1 empty), a final node with a non-empty inner stack pops back to the return
// node. Then per child byte: configurations that may leave the position's own rule (final, empty
// inner stack) with that byte in the rule's FOLLOW set record an exit (the child's subtree is
// context-dependent); configurations with an edge on the byte move; a child any configuration
// reaches marks its token accepted and is walked.
//
// Budget (the Python side raises the named errors): walked steps against max_steps, exit tokens
// against max_exit_tokens, the clock against seconds_left; the walk stops at the first limit and
// reports which.
//
// Plain C++17, no instruction-set flags: the walk is branches and small sets, not arithmetic.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace {

using Config = uint64_t;  // (automaton node << 32) | (inner stack id + 1)

inline Config make_config(int64_t node, int64_t stack) {
    return (static_cast<uint64_t>(node) << 32) | static_cast<uint32_t>(stack + 1);
}
inline int64_t config_node(Config c) { return static_cast<int64_t>(c >> 32); }
inline int64_t config_stack(Config c) { return static_cast<int64_t>(static_cast<uint32_t>(c)) - 1; }

enum Status : int32_t { OK = 0, OVER_STEPS = 1, OVER_EXITS = 2, OVER_TIME = 3 };

struct Automaton {
    const int32_t* table;       // [N, 256]
    const uint8_t* final;       // [N]
    const int64_t* ref_offsets; // [N + 1]
    const int32_t* ref_callee;
    const int32_t* ref_return;
    const int32_t* rule_start;  // [R]
    const int32_t* node_rule;   // [N]
    const uint8_t* follow;      // [R, 256]
};

struct Trie {  // in preorder
    const int32_t* node;            // the trie node (as token_masks numbers them)
    const uint8_t* byte;            // the byte on the edge into it
    const int32_t* token;           // the token it spells, or -1
    const int32_t* depth;           // its byte length
    const int32_t* end;             // the preorder index after its subtree
    const int64_t* subtree_tokens;  // tokens at or below it
    int64_t size;
};

struct Walk {
    Automaton a;
    Trie t;
    int64_t row_bytes;
    uint8_t* accepted;  // [positions, row_bytes]: packed bits, np.packbits order (first token: high bit)
    int64_t max_steps, max_exit_tokens;
    std::chrono::steady_clock::time_point deadline;

    // inner stacks, interned
    std::vector<int64_t> stack_node, stack_parent;
    std::unordered_map<uint64_t, int32_t> stack_ids;

    std::vector<int64_t> exit_origin, exit_child, exit_state;
    int64_t steps = 0, exit_tokens = 0, next_clock_check = 0;
    int32_t status = OK;
    int64_t status_value = 0;

    // one configuration set per trie depth, reused across positions (sized once, to the
    // longest token: the walk holds a parent's and a child's at a time)
    std::vector<std::vector<Config>> sets;
    std::vector<Config> work;

    int64_t intern(int64_t ret, int64_t parent) {
        uint64_t key = (static_cast<uint64_t>(ret) << 32) | static_cast<uint32_t>(parent + 1);
        auto it = stack_ids.find(key);
        if (it != stack_ids.end()) return it->second;
        int32_t id = static_cast<int32_t>(stack_node.size());
        stack_node.push_back(ret);
        stack_parent.push_back(parent);
        stack_ids.emplace(key, id);
        return id;
    }

    bool needs_closure(int64_t node, int64_t stack) const {
        return a.ref_offsets[node + 1] > a.ref_offsets[node] || (a.final[node] && stack >= 0);
    }

    // Adds every configuration reachable by pushes and pops to `set` (kept distinct).
    void close(std::vector<Config>& set) {
        bool any = false;
        for (Config c : set) any = any || needs_closure(config_node(c), config_stack(c));
        if (!any) return;
        work.assign(set.begin(), set.end());
        auto add = [&](Config c) {
            if (std::find(set.begin(), set.end(), c) == set.end()) {
                set.push_back(c);
                work.push_back(c);
            }
        };
        while (!work.empty()) {
            Config c = work.back();
            work.pop_back();
            int64_t d = config_node(c), s = config_stack(c);
            for (int64_t r = a.ref_offsets[d]; r < a.ref_offsets[d + 1]; ++r)
                add(make_config(a.rule_start[a.ref_callee[r]], intern(a.ref_return[r], s)));
            if (a.final[d] && s >= 0) add(make_config(stack_node[s], stack_parent[s]));
        }
    }

    bool over_budget() {
        if (steps > max_steps) {
            status = OVER_STEPS;
            status_value = steps;
            return true;
        }
        if (steps >= next_clock_check) {
            next_clock_check = steps + 65536;
            if (std::chrono::steady_clock::now() > deadline) {
                status = OVER_TIME;
                return true;
            }
        }
        return false;
    }

    bool record_exit(int64_t row, int64_t i, int64_t state) {
        exit_origin.push_back(row);
        exit_child.push_back(t.node[i]);
        exit_state.push_back(state);
        exit_tokens += t.subtree_tokens[i];
        if (exit_tokens > max_exit_tokens) {
            status = OVER_EXITS;
            status_value = exit_tokens;
            return false;
        }
        return true;
    }

    // The trie below the root for position `row`: sets[d] holds the (closed) configurations of
    // the current node at depth d, so a node's parent set is sets[depth - 1].
    void walk(int64_t row, int64_t position) {
        sets[0].assign(1, make_config(position, -1));  // NOTE: the root's set is not closed
        for (int64_t i = 1; i < t.size;) {
            int32_t depth = t.depth[i];
            const std::vector<Config>& parent = sets[static_cast<size_t>(depth) - 1];
            steps += static_cast<int64_t>(parent.size());
            if (over_budget()) return;
            int64_t byte = t.byte[i];
            std::vector<Config>& here = sets[static_cast<size_t>(depth)];
            here.clear();
            for (Config c : parent) {
                int64_t d = config_node(c), s = config_stack(c);
                // The position's own rule may end here and `byte` may follow it: the subtree
                // depends on the stack below (context-dependent).
                if (depth >= 2 && s < 0 && a.final[d] && a.follow[static_cast<int64_t>(a.node_rule[d]) * 256 + byte] &&
                    !record_exit(row, i, d))
                    return;
                int32_t to = a.table[d * 256 + byte];
                if (to >= 0) {
                    Config moved = make_config(to, s);
                    if (here.empty() || std::find(here.begin(), here.end(), moved) == here.end()) here.push_back(moved);
                }
            }
            if (here.empty()) {
                i = t.end[i];  // nothing reaches this node: skip its subtree
                continue;
            }
            int32_t tok = t.token[i];
            if (tok >= 0) accepted[row * row_bytes + (tok >> 3)] |= static_cast<uint8_t>(0x80u >> (tok & 7));
            close(here);
            ++i;
        }
    }
};

}  // namespace

extern "C" {

// Classifies every token at each of `num_positions` automaton nodes (`positions`; the trie in
// preorder, `trie_depth` its longest token's length); fills
// `accepted` ([num_positions, ceil(vocab_size / 8)] packed bits, zeroed by the caller) and returns a walk
// holding the exits and the status (free it with sglc_walk_free).
__attribute__((visibility("default"))) void* sglc_walk_tokens(
    const int32_t* table, const uint8_t* final, const int64_t* ref_offsets, const int32_t* ref_callee,
    const int32_t* ref_return, const int32_t* rule_start, const int32_t* node_rule, const uint8_t* follow,
    const int32_t* trie_node, const uint8_t* trie_byte, const int32_t* trie_token, const int32_t* trie_depth_of,
    const int32_t* trie_end, const int64_t* subtree_tokens, int64_t trie_size, int64_t trie_depth,
    const int64_t* positions, int64_t num_positions, int64_t vocab_size, uint8_t* accepted, int64_t max_steps,
    int64_t max_exit_tokens, double seconds_left) {
    Walk* w = new Walk();
    w->a = {table, final, ref_offsets, ref_callee, ref_return, rule_start, node_rule, follow};
    w->t = {trie_node, trie_byte, trie_token, trie_depth_of, trie_end, subtree_tokens, trie_size};
    w->row_bytes = (vocab_size + 7) / 8;
    w->accepted = accepted;
    w->max_steps = max_steps;
    w->max_exit_tokens = max_exit_tokens;
    w->deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds_left));
    w->sets.resize(static_cast<size_t>(trie_depth) + 1);
    for (int64_t row = 0; row < num_positions && w->status == OK; ++row) w->walk(row, positions[row]);
    return w;
}

// 0 ok; 1 over max_steps, 2 over max_exit_tokens (value: the count reached), 3 over the clock.
__attribute__((visibility("default"))) int32_t sglc_walk_status(void* walk, int64_t* value) {
    Walk* w = static_cast<Walk*>(walk);
    *value = w->status_value;
    return w->status;
}

__attribute__((visibility("default"))) int64_t sglc_walk_num_exits(void* walk) {
    return static_cast<int64_t>(static_cast<Walk*>(walk)->exit_origin.size());
}

__attribute__((visibility("default"))) void sglc_walk_exits(void* walk, int64_t* origin, int64_t* child, int64_t* state) {
    Walk* w = static_cast<Walk*>(walk);
    std::copy(w->exit_origin.begin(), w->exit_origin.end(), origin);
    std::copy(w->exit_child.begin(), w->exit_child.end(), child);
    std::copy(w->exit_state.begin(), w->exit_state.end(), state);
}

__attribute__((visibility("default"))) void sglc_walk_free(void* walk) { delete static_cast<Walk*>(walk); }

}  // extern "C"
