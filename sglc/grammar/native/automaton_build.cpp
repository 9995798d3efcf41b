// The grammar automaton from the kept rules' NFA (sglc/grammar/automaton.py `build_automaton`; the
// Python stages in rule_automaton.py and automaton.py are the reference and the fallback): per
// rule a DFA by subset construction, then the productive rules to a fixpoint, each rule trimmed
// and minimized (Moore), assembled into one numbering, with the rules' nullability and FOLLOW
// bytes. Node numbers come out exactly as the Python stages number them (same discovery order),
// so the two paths give equal arrays. A small grammar spent ~0.3 ms per stage in Python's fixed
// costs; here the whole build takes tens of microseconds.
//
// The NFA: one numbering over all kept rules; edges given as flat (source, ...) arrays: epsilon
// (src, dst), byte ranges (src, lo, hi, dst), rule references (src, rule, dst). Rule r starts at
// its NFA start and ends at its NFA end; its name's rank orders rules by name (the Python stages
// sort a node's references by callee name).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using Set = std::vector<int32_t>;  // sorted, distinct

struct SetHash {
    size_t operator()(const Set& s) const {
        uint64_t h = 1469598103934665603ull ^ s.size();
        for (int32_t v : s) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ull;
        return static_cast<size_t>(h);
    }
};

// Edges of one kind grouped by source node: edge e's fields are data[e * width ...], the first
// its source.
struct Csr {
    const int32_t* data = nullptr;
    int64_t width = 0;
    std::vector<int64_t> offsets;
    std::vector<int64_t> order;  // edge indices grouped by source
    void build(const int32_t* edges, int64_t count, int64_t fields, int64_t nodes) {
        data = edges;
        width = fields;
        offsets.assign(static_cast<size_t>(nodes) + 1, 0);
        for (int64_t e = 0; e < count; ++e) ++offsets[static_cast<size_t>(edges[e * width]) + 1];
        for (int64_t n = 0; n < nodes; ++n) offsets[n + 1] += offsets[n];
        std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
        order.resize(static_cast<size_t>(count));
        for (int64_t e = 0; e < count; ++e) order[static_cast<size_t>(fill[edges[e * width]]++)] = e;
    }
    // Field f (1: the first after the source) of the k-th edge in source order.
    int32_t field(int64_t k, int f) const { return data[order[k] * width + f]; }
};

struct Nfa {
    int64_t nodes;
    Csr eps, bytes, refs;  // (src, dst), (src, lo, hi, dst), (src, rule, dst)
};

// One rule's DFA (node 0 its start) over byte classes: bytes no row tells apart share a column
// (a rule uses a few dozen distinct ranges, so the stages below read a few dozen columns, not 256).
struct Dfa {
    int32_t n = 0;
    int32_t width = 0;                                // byte classes
    uint8_t byte_class[256] = {};                     // byte -> its column
    std::vector<int32_t> table;                       // [n, width], -1 none
    std::vector<uint8_t> final;                       // [n]
    std::vector<std::vector<std::pair<int32_t, int32_t>>> refs;  // (callee rule, target) by callee name
    const int32_t* row(int32_t i) const { return &table[static_cast<size_t>(i) * width]; }
    // The same classes and columns, other rows (trim and minimize keep the columns).
    Dfa like() const {
        Dfa d;
        d.width = width;
        std::memcpy(d.byte_class, byte_class, sizeof(byte_class));
        return d;
    }
};

enum Status : int64_t { OK = 0, TOO_MANY_NODES = 1, OUT_OF_TIME = 2, ROOT_MATCHES_NOTHING = 3 };

struct Clock {
    std::chrono::steady_clock::time_point deadline;
    bool passed() const { return std::chrono::steady_clock::now() > deadline; }
};

class Determinizer {
  public:
    Determinizer(const Nfa& nfa, const int32_t* name_rank)
        : nfa_(nfa), rank_(name_rank), memo_(nfa.nodes), mark_(nfa.nodes, 0) {}

    // Subset construction of the rule between start and end; status and the node count that passed.
    Status run(int32_t start, int32_t end, int64_t used, int64_t max_nodes, const Clock& clock, Dfa& out,
               int64_t& value) {
        std::unordered_map<Set, int32_t, SetHash> ids;
        std::vector<const Set*> order;
        auto id_of = [&](const Set& key, int32_t& id) -> bool {
            auto it = ids.find(key);
            if (it != ids.end()) {
                id = it->second;
                return true;
            }
            id = static_cast<int32_t>(order.size());
            auto placed = ids.emplace(key, id).first;
            order.push_back(&placed->first);
            if (used + static_cast<int64_t>(order.size()) > max_nodes) {
                value = used + static_cast<int64_t>(order.size());
                return false;
            }
            return true;
        };
        int32_t start_id;
        if (!id_of(closure_of_set(Set{start}), start_id)) return TOO_MANY_NODES;
        std::vector<int32_t> dense;  // [n, 256] while building
        uint8_t boundary[257] = {};  // a row's value may change at this byte
        for (size_t i = 0; i < order.size(); ++i) {
            if (i % 256 == 0 && clock.passed()) return OUT_OF_TIME;
            const Set& cur = *order[i];  // NOTE: keys of an unordered_map stay put when it rehashes
            dense.resize(dense.size() + 256, -1);
            // Sweep the byte axis: at each cut, edges starting there join, edges ending there leave.
            struct Edge { int32_t at, delta, target; };
            std::vector<Edge> cuts;
            for (int32_t n : cur) {
                for (int64_t k = nfa_.bytes.offsets[n]; k < nfa_.bytes.offsets[n + 1]; ++k) {
                    int32_t target = nfa_.bytes.field(k, 3);
                    cuts.push_back({nfa_.bytes.field(k, 1), 1, target});
                    cuts.push_back({nfa_.bytes.field(k, 2) + 1, -1, target});
                }
            }
            std::sort(cuts.begin(), cuts.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
            std::vector<std::pair<int32_t, int32_t>> active;  // (target, count), sorted by target
            for (size_t c = 0; c < cuts.size();) {
                int32_t a = cuts[c].at;
                boundary[a] = 1;
                for (; c < cuts.size() && cuts[c].at == a; ++c) {
                    auto it = std::lower_bound(active.begin(), active.end(), std::make_pair(cuts[c].target, INT32_MIN));
                    if (it != active.end() && it->first == cuts[c].target) {
                        it->second += cuts[c].delta;
                        if (it->second == 0) active.erase(it);
                    } else {
                        active.insert(it, {cuts[c].target, cuts[c].delta});
                    }
                }
                if (active.empty() || c == cuts.size()) continue;
                int32_t b = cuts[c].at;
                Set targets;
                targets.reserve(active.size());
                for (auto& t : active) targets.push_back(t.first);
                int32_t id;
                if (!id_of(closure_of_set(targets), id)) return TOO_MANY_NODES;
                int32_t* row = &dense[i * 256];
                for (int32_t x = a; x < b; ++x) row[x] = id;
            }
            // References, grouped by callee, in callee-name order.
            std::vector<std::pair<int32_t, int32_t>> calls;  // (callee, target)
            for (int32_t n : cur) {
                for (int64_t k = nfa_.refs.offsets[n]; k < nfa_.refs.offsets[n + 1]; ++k) {
                    calls.push_back({nfa_.refs.field(k, 1), nfa_.refs.field(k, 2)});
                }
            }
            std::sort(calls.begin(), calls.end(), [&](const auto& x, const auto& y) {
                return rank_[x.first] != rank_[y.first] ? rank_[x.first] < rank_[y.first] : x.second < y.second;
            });
            std::vector<std::pair<int32_t, int32_t>> ref_row;
            for (size_t c = 0; c < calls.size();) {
                int32_t callee = calls[c].first;
                Set targets;
                for (; c < calls.size() && calls[c].first == callee; ++c) targets.push_back(calls[c].second);
                targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
                int32_t id;
                if (!id_of(closure_of_set(targets), id)) return TOO_MANY_NODES;
                ref_row.push_back({callee, id});
            }
            out.refs.push_back(std::move(ref_row));
            out.final.push_back(std::binary_search(cur.begin(), cur.end(), end) ? 1 : 0);
        }
        out.n = static_cast<int32_t>(order.size());
        // Byte classes: between two boundaries no row changes.
        std::vector<int> first_byte{0};
        for (int b = 1; b < 256; ++b) {
            if (boundary[b]) first_byte.push_back(b);
            out.byte_class[b] = static_cast<uint8_t>(first_byte.size() - 1);
        }
        out.width = static_cast<int32_t>(first_byte.size());
        out.table.resize(static_cast<size_t>(out.n) * out.width);
        for (int32_t i = 0; i < out.n; ++i) {
            for (int32_t c = 0; c < out.width; ++c) out.table[static_cast<size_t>(i) * out.width + c] = dense[i * 256 + first_byte[c]];
        }
        return OK;
    }

  private:
    const Nfa& nfa_;
    const int32_t* rank_;
    std::vector<Set> memo_;  // epsilon closure per NFA node (empty: not yet computed)
    std::vector<uint32_t> mark_;  // == stamp_: seen by the closure being computed
    uint32_t stamp_ = 0;
    std::unordered_map<Set, Set, SetHash> set_memo_;

    const Set& node_closure(int32_t n) {
        Set& got = memo_[n];
        if (!got.empty()) return got;
        ++stamp_;
        std::vector<int32_t> stack{n}, seen{n};
        mark_[n] = stamp_;
        while (!stack.empty()) {
            int32_t x = stack.back();
            stack.pop_back();
            for (int64_t k = nfa_.eps.offsets[x]; k < nfa_.eps.offsets[x + 1]; ++k) {
                int32_t m = nfa_.eps.field(k, 1);
                if (mark_[m] != stamp_) {
                    mark_[m] = stamp_;
                    seen.push_back(m);
                    stack.push_back(m);
                }
            }
        }
        std::sort(seen.begin(), seen.end());
        got = std::move(seen);
        return got;
    }

    Set closure(const Set& nodes) {
        Set out;
        for (int32_t n : nodes) {
            const Set& c = node_closure(n);
            out.insert(out.end(), c.begin(), c.end());
        }
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        return out;
    }

    const Set& closure_of_set(const Set& nodes) {
        auto it = set_memo_.find(nodes);
        if (it != set_memo_.end()) return it->second;
        return set_memo_.emplace(nodes, closure(nodes)).first->second;
    }
};

// Nodes that can reach a final node (byte edges and references to productive rules).
std::vector<uint8_t> alive_nodes(const Dfa& d, const std::vector<uint8_t>& productive) {
    std::vector<uint8_t> alive(d.final.begin(), d.final.end());
    // NOTE: rules are small (tens to hundreds of nodes): sweeping to a fixpoint beats building
    // predecessor lists.
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t i = d.n - 1; i >= 0; --i) {
            if (alive[i]) continue;
            const int32_t* row = d.row(i);
            bool any = false;
            for (int32_t c = 0; c < d.width && !any; ++c) any = row[c] >= 0 && alive[row[c]];
            for (auto& r : d.refs[i]) any = any || (productive[r.first] && alive[r.second]);
            if (any) alive[i] = changed = true;
        }
    }
    return alive;
}

// Only the nodes reachable from the start through alive ones, in their order (rule_automaton.trim).
Dfa trim(const Dfa& d, const std::vector<uint8_t>& productive) {
    std::vector<uint8_t> alive = alive_nodes(d, productive);
    std::vector<uint8_t> reach(d.n, 0);
    std::vector<int32_t> stack{0};
    reach[0] = 1;
    while (!stack.empty()) {
        int32_t x = stack.back();
        stack.pop_back();
        auto visit = [&](int32_t j) {
            if (alive[j] && !reach[j]) {
                reach[j] = 1;
                stack.push_back(j);
            }
        };
        const int32_t* row = d.row(x);
        for (int32_t c = 0; c < d.width; ++c) {
            if (row[c] >= 0) visit(row[c]);
        }
        for (auto& r : d.refs[x]) {
            if (productive[r.first]) visit(r.second);
        }
    }
    std::vector<int32_t> remap(d.n, -1);
    Dfa out = d.like();
    for (int32_t i = 0; i < d.n; ++i) {
        if (reach[i]) remap[i] = out.n++;
    }
    out.table.resize(static_cast<size_t>(out.n) * out.width);
    for (int32_t i = 0; i < d.n; ++i) {
        if (!reach[i]) continue;
        const int32_t* row = d.row(i);
        int32_t* into = &out.table[static_cast<size_t>(remap[i]) * out.width];
        for (int32_t c = 0; c < d.width; ++c) into[c] = row[c] < 0 ? -1 : remap[row[c]];
        out.final.push_back(d.final[i]);
        std::vector<std::pair<int32_t, int32_t>> refs;
        for (auto& r : d.refs[i]) {
            if (productive[r.first] && remap[r.second] >= 0) refs.push_back({r.first, remap[r.second]});
        }
        out.refs.push_back(std::move(refs));
    }
    return out;
}

// Rows of a flat [rows, width] int32 array numbered by first occurrence: equal rows get the id of
// the first such row (open addressing on a row hash; rows compared in place, nothing copied).
class RowIds {
  public:
    // ids[i] for each row; returns the number of distinct rows.
    int32_t number(const int32_t* data, size_t rows, size_t width, int32_t* ids) {
        size_t cap = 16;
        while (cap < rows * 2) cap <<= 1;
        slots_.assign(cap, -1);
        int32_t count = 0;
        std::vector<int32_t> first_of;  // the first row of each id
        for (size_t i = 0; i < rows; ++i) {
            const int32_t* row = data + i * width;
            uint64_t h = 1469598103934665603ull;
            for (size_t k = 0; k < width; ++k) h = (h ^ static_cast<uint32_t>(row[k])) * 1099511628211ull;
            size_t slot = static_cast<size_t>(h ^ (h >> 29)) & (cap - 1);
            while (true) {
                int32_t id = slots_[slot];
                if (id < 0) {
                    slots_[slot] = count;
                    first_of.push_back(static_cast<int32_t>(i));
                    ids[i] = count++;
                    break;
                }
                if (std::memcmp(data + static_cast<size_t>(first_of[id]) * width, row, width * sizeof(int32_t)) == 0) {
                    ids[i] = id;
                    break;
                }
                slot = (slot + 1) & (cap - 1);
            }
        }
        return count;
    }

  private:
    std::vector<int32_t> slots_;
};

// Moore partition refinement; blocks numbered in first-seen order, so the start's is 0
// (rule_automaton.minimize: the coarsest stable partition is unique, whatever computes it).
Dfa minimize(const Dfa& d) {
    RowIds row_ids;
    // Columns equal in every row (trimming may have made them so) behave alike: refine on one of each.
    std::vector<int> columns;
    {
        std::vector<int32_t> by_column(static_cast<size_t>(d.n) * d.width);
        for (int32_t i = 0; i < d.n; ++i) {
            for (int32_t c = 0; c < d.width; ++c) by_column[static_cast<size_t>(c) * d.n + i] = d.row(i)[c];
        }
        std::vector<int32_t> ids(d.width);
        row_ids.number(by_column.data(), static_cast<size_t>(d.width), static_cast<size_t>(d.n), ids.data());
        for (int32_t c = 0; c < d.width; ++c) {
            if (ids[c] == static_cast<int32_t>(columns.size())) columns.push_back(c);
        }
    }
    std::vector<int32_t> callees;
    for (auto& refs : d.refs) {
        for (auto& r : refs) callees.push_back(r.first);
    }
    std::sort(callees.begin(), callees.end());
    callees.erase(std::unique(callees.begin(), callees.end()), callees.end());
    // Each node's moves once: targets per distinct byte column, then per callee (-1: none).
    const size_t width = 1 + columns.size() + callees.size();
    std::vector<int32_t> moves(static_cast<size_t>(d.n) * width, -1);
    for (int32_t i = 0; i < d.n; ++i) {
        int32_t* m = &moves[static_cast<size_t>(i) * width];
        for (size_t c = 0; c < columns.size(); ++c) m[1 + c] = d.row(i)[columns[c]];
        for (auto& r : d.refs[i]) {
            size_t c = std::lower_bound(callees.begin(), callees.end(), r.first) - callees.begin();
            m[1 + columns.size() + c] = r.second;
        }
    }
    std::vector<int32_t> block(d.n), sigs(moves.size());
    for (int32_t i = 0; i < d.n; ++i) block[i] = d.final[i];
    int32_t count = -1;
    while (true) {
        for (int32_t i = 0; i < d.n; ++i) {
            const int32_t* m = &moves[static_cast<size_t>(i) * width];
            int32_t* s = &sigs[static_cast<size_t>(i) * width];
            s[0] = block[i];
            for (size_t k = 1; k < width; ++k) s[k] = m[k] < 0 ? -1 : block[m[k]];
        }
        int32_t now = row_ids.number(sigs.data(), static_cast<size_t>(d.n), width, block.data());
        if (now == count) break;
        count = now;
    }
    Dfa out = d.like();
    out.n = count;
    std::vector<int32_t> rep(out.n, -1);
    for (int32_t i = 0; i < d.n; ++i) {
        if (rep[block[i]] < 0) rep[block[i]] = i;
    }
    out.table.resize(static_cast<size_t>(out.n) * out.width);
    for (int32_t b = 0; b < out.n; ++b) {
        const int32_t* row = d.row(rep[b]);
        for (int32_t c = 0; c < d.width; ++c) out.table[static_cast<size_t>(b) * out.width + c] = row[c] < 0 ? -1 : block[row[c]];
        out.final.push_back(d.final[rep[b]]);
        std::vector<std::pair<int32_t, int32_t>> refs;
        for (auto& r : d.refs[rep[b]]) refs.push_back({r.first, block[r.second]});
        out.refs.push_back(std::move(refs));
    }
    return out;
}

struct Automaton {
    Status status = OK;
    int64_t value = 0;
    std::vector<int32_t> rules;  // kept productive rules (input indices), in input order
    std::vector<int32_t> rule_start, node_rule, table, ref_callee, ref_return;
    std::vector<uint8_t> final, nullable, follow;
    std::vector<int64_t> ref_offsets;
};

using Bits = std::vector<uint64_t>;  // 4 words a row: 256 bytes

void analyse(Automaton& a) {
    const size_t n = a.final.size(), r = a.rule_start.size();
    // can_end[n]: the rule can end from n without input; nullable[r]: from its start. Least fixpoint.
    std::vector<uint8_t> can_end(n), nullable(r, 0);
    while (true) {
        can_end.assign(a.final.begin(), a.final.end());
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t x = 0; x < n; ++x) {
                if (can_end[x]) continue;
                for (int64_t k = a.ref_offsets[x]; k < a.ref_offsets[x + 1]; ++k) {
                    if (nullable[a.ref_callee[k]] && can_end[a.ref_return[k]]) {
                        can_end[x] = 1;
                        changed = true;
                        break;
                    }
                }
            }
        }
        bool same = true;
        for (size_t i = 0; i < r; ++i) {
            uint8_t v = can_end[a.rule_start[i]];
            if (v != nullable[i]) same = false;
            nullable[i] = v;
        }
        if (same) break;
    }
    a.nullable = nullable;
    // FIRST bytes per node (own edges, callees' firsts, a nullable callee's return), then FOLLOW per rule.
    Bits first(n * 4, 0), follow(r * 4, 0);
    for (size_t x = 0; x < n; ++x) {
        for (int b = 0; b < 256; ++b) {
            if (a.table[x * 256 + b] >= 0) first[x * 4 + b / 64] |= 1ull << (b % 64);
        }
    }
    auto merge = [](uint64_t* into, const uint64_t* from) {
        bool grew = false;
        for (int w = 0; w < 4; ++w) {
            uint64_t v = into[w] | from[w];
            grew |= v != into[w];
            into[w] = v;
        }
        return grew;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t x = 0; x < n; ++x) {
            for (int64_t k = a.ref_offsets[x]; k < a.ref_offsets[x + 1]; ++k) {
                changed |= merge(&first[x * 4], &first[static_cast<size_t>(a.rule_start[a.ref_callee[k]]) * 4]);
                if (nullable[a.ref_callee[k]]) changed |= merge(&first[x * 4], &first[static_cast<size_t>(a.ref_return[k]) * 4]);
            }
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t x = 0; x < n; ++x) {
            for (int64_t k = a.ref_offsets[x]; k < a.ref_offsets[x + 1]; ++k) {
                uint64_t* into = &follow[static_cast<size_t>(a.ref_callee[k]) * 4];
                changed |= merge(into, &first[static_cast<size_t>(a.ref_return[k]) * 4]);
                if (can_end[a.ref_return[k]]) changed |= merge(into, &follow[static_cast<size_t>(a.node_rule[x]) * 4]);
            }
        }
    }
    a.follow.assign(r * 256, 0);
    for (size_t i = 0; i < r; ++i) {
        for (int b = 0; b < 256; ++b) a.follow[i * 256 + b] = (follow[i * 4 + b / 64] >> (b % 64)) & 1;
    }
}

Automaton* build(const Nfa& nfa, int32_t num_rules, const int32_t* nfa_start, const int32_t* nfa_end,
                 const int32_t* name_rank, int64_t max_nodes, const Clock& clock) {
    auto* a = new Automaton();
    std::vector<Dfa> dfas(num_rules);
    Determinizer det(nfa, name_rank);
    int64_t used = 0;
    for (int32_t r = 0; r < num_rules; ++r) {
        a->status = det.run(nfa_start[r], nfa_end[r], used, max_nodes, clock, dfas[r], a->value);
        if (a->status != OK) return a;
        used += dfas[r].n;
        if (clock.passed()) {
            a->status = OUT_OF_TIME;
            return a;
        }
    }
    std::vector<uint8_t> productive(num_rules, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < num_rules; ++r) {
            if (!productive[r] && alive_nodes(dfas[r], productive)[0]) productive[r] = changed = true;
        }
    }
    if (!productive[0]) {
        a->status = ROOT_MATCHES_NOTHING;
        return a;
    }
    std::vector<int32_t> new_index(num_rules, -1);
    std::vector<Dfa> kept;
    for (int32_t r = 0; r < num_rules; ++r) {
        if (!productive[r]) continue;
        new_index[r] = static_cast<int32_t>(a->rules.size());
        a->rules.push_back(r);
        kept.push_back(minimize(trim(dfas[r], productive)));
    }
    if (clock.passed()) {
        a->status = OUT_OF_TIME;
        return a;
    }
    int32_t base = 0;
    size_t total = 0;
    for (const Dfa& d : kept) total += static_cast<size_t>(d.n);
    a->table.resize(total * 256);
    a->ref_offsets.push_back(0);
    for (size_t i = 0; i < kept.size(); ++i) {
        const Dfa& d = kept[i];
        a->rule_start.push_back(base);
        for (int32_t x = 0; x < d.n; ++x) {
            const int32_t* row = d.row(x);
            int32_t* into = &a->table[(static_cast<size_t>(base) + x) * 256];
            for (int b = 0; b < 256; ++b) {
                int32_t t = row[d.byte_class[b]];
                into[b] = t < 0 ? -1 : t + base;
            }
            a->final.push_back(d.final[x]);
            a->node_rule.push_back(static_cast<int32_t>(i));
            std::vector<std::pair<int32_t, int32_t>> refs;
            for (auto& r : d.refs[x]) refs.push_back({new_index[r.first], r.second + base});
            std::sort(refs.begin(), refs.end());
            for (auto& r : refs) {
                a->ref_callee.push_back(r.first);
                a->ref_return.push_back(r.second);
            }
            a->ref_offsets.push_back(static_cast<int64_t>(a->ref_callee.size()));
        }
        base += d.n;
    }
    analyse(*a);
    return a;
}

}  // namespace

#define SGLC_EXPORT extern "C" __attribute__((visibility("default")))

// Builds the automaton; sglc_automaton_status says whether it finished (sizes and arrays follow).
// rules: [num_rules, 3] (NFA start, NFA end, rank of the rule's name).
SGLC_EXPORT void* sglc_automaton_build(int64_t nfa_nodes, const int32_t* eps, int64_t num_eps, const int32_t* bytes,
                                       int64_t num_bytes, const int32_t* refs, int64_t num_refs, int32_t num_rules,
                                       const int32_t* rules, int64_t max_nodes, double seconds_left) {
    Nfa nfa{nfa_nodes, {}, {}, {}};
    nfa.eps.build(eps, num_eps, 2, nfa_nodes);
    nfa.bytes.build(bytes, num_bytes, 4, nfa_nodes);
    nfa.refs.build(refs, num_refs, 3, nfa_nodes);
    std::vector<int32_t> nfa_start(num_rules), nfa_end(num_rules), name_rank(num_rules);
    for (int32_t r = 0; r < num_rules; ++r) {
        nfa_start[r] = rules[r * 3];
        nfa_end[r] = rules[r * 3 + 1];
        name_rank[r] = rules[r * 3 + 2];
    }
    Clock clock{std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds_left > 0 ? seconds_left : 0.0))};
    return build(nfa, num_rules, nfa_start.data(), nfa_end.data(), name_rank.data(), max_nodes, clock);
}

// status (0 done, 1 too many nodes, 2 out of time, 3 the root matches nothing); sizes[3] = rules
// kept, nodes, references; value = the node count that passed the limit.
SGLC_EXPORT int64_t sglc_automaton_status(void* handle, int64_t* sizes, int64_t* value) {
    auto* a = static_cast<Automaton*>(handle);
    sizes[0] = static_cast<int64_t>(a->rules.size());
    sizes[1] = static_cast<int64_t>(a->final.size());
    sizes[2] = static_cast<int64_t>(a->ref_callee.size());
    *value = a->value;
    return a->status;
}

SGLC_EXPORT void sglc_automaton_export(void* handle, int32_t* rules, int32_t* rule_start, int32_t* node_rule,
                                       int32_t* table, uint8_t* final, int64_t* ref_offsets, int32_t* ref_callee,
                                       int32_t* ref_return, uint8_t* nullable, uint8_t* follow) {
    auto* a = static_cast<Automaton*>(handle);
    auto copy = [](auto* into, const auto& from) {
        if (!from.empty()) std::memcpy(into, from.data(), from.size() * sizeof(from[0]));
    };
    copy(rules, a->rules);
    copy(rule_start, a->rule_start);
    copy(node_rule, a->node_rule);
    copy(table, a->table);
    copy(final, a->final);
    copy(ref_offsets, a->ref_offsets);
    copy(ref_callee, a->ref_callee);
    copy(ref_return, a->ref_return);
    copy(nullable, a->nullable);
    copy(follow, a->follow);
}

SGLC_EXPORT void sglc_automaton_free(void* handle) { delete static_cast<Automaton*>(handle); }
