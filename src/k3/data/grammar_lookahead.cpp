// The LL(1) analysis of a Grammar: nullable nonterminals, FIRST and FOLLOW sets, the predict
// table, and which terminals can follow which. Sets are over terminals plus end_of_input().
#include "k3/base/error.h"
#include "k3/data/grammar.h"

namespace k3::data {
namespace {

using TerminalSet = std::vector<char>;

bool merge_into(TerminalSet& into, const TerminalSet& from) {
  bool grew = false;
  for (size_t t = 0; t < into.size(); ++t)
    if (from[t] && !into[t]) into[t] = grew = true;
  return grew;
}

std::vector<int> members(const TerminalSet& set) {
  std::vector<int> out;
  for (size_t t = 0; t < set.size(); ++t)
    if (set[t]) out.push_back(static_cast<int>(t));
  return out;
}

struct FirstSets {
  std::vector<char> nullable;      // per nonterminal
  std::vector<TerminalSet> first;  // per nonterminal

  // Adds FIRST(symbols) to `into`; returns whether all of symbols can derive nothing.
  bool first_of(std::span<const Symbol> symbols, TerminalSet& into) const {
    for (const Symbol& s : symbols) {
      if (s.terminal) {
        into[s.index] = 1;
        return false;
      }
      merge_into(into, first[s.index]);
      if (!nullable[s.index]) return false;
    }
    return true;
  }
};

FirstSets first_sets(const Grammar& g) {
  const size_t width = static_cast<size_t>(g.num_terminals()) + 1;
  FirstSets f{std::vector<char>(g.num_nonterminals(), 0),
              std::vector<TerminalSet>(g.num_nonterminals(), TerminalSet(width, 0))};
  for (bool changed = true; changed;) {
    changed = false;
    for (const Rule& rule : g.rules()) {
      TerminalSet first(width, 0);
      const bool nullable = f.first_of(rule.rhs, first);
      changed |= merge_into(f.first[rule.lhs], first);
      if (nullable && !f.nullable[rule.lhs]) f.nullable[rule.lhs] = changed = true;
    }
  }
  return f;
}

std::vector<TerminalSet> follow_sets(const Grammar& g, const FirstSets& f) {
  const size_t width = static_cast<size_t>(g.num_terminals()) + 1;
  std::vector<TerminalSet> follow(g.num_nonterminals(), TerminalSet(width, 0));
  follow[g.start()][g.end_of_input()] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (const Rule& rule : g.rules()) {
      for (size_t i = 0; i < rule.rhs.size(); ++i) {
        if (rule.rhs[i].terminal) continue;
        TerminalSet next(width, 0);
        if (f.first_of(std::span(rule.rhs).subspan(i + 1), next))
          merge_into(next, follow[rule.lhs]);
        changed |= merge_into(follow[rule.rhs[i].index], next);
      }
    }
  }
  return follow;
}

}  // namespace

void Grammar::analyse_lookahead() {
  const FirstSets f = first_sets(*this);
  const std::vector<TerminalSet> follow = follow_sets(*this, f);
  const size_t width = terminals_.size() + 1;

  predict_.assign(nonterminals_.size() * width, -1);
  for (size_t r = 0; r < rules_.size(); ++r) {
    const Rule& rule = rules_[r];
    TerminalSet lookahead(width, 0);
    if (f.first_of(rule.rhs, lookahead)) merge_into(lookahead, follow[rule.lhs]);
    for (int t : members(lookahead)) {
      int& slot = predict_[rule.lhs * width + t];
      if (slot >= 0) {
        const std::string next =
            t == end_of_input() ? "the end of the input" : "'" + terminals_[t] + "'";
        throw Error("grammar is not LL(1): rules '" + rule_text(slot) + "' and '" +
                        rule_text(static_cast<int>(r)) + "' can both be followed by " + next,
                    ErrorContext{"", nonterminals_[rule.lhs], -1});
      }
      slot = static_cast<int>(r);
    }
  }

  TerminalSet starting(width, 0);
  const Symbol start_symbol{false, start_};
  if (f.first_of(std::span(&start_symbol, 1), starting)) starting[end_of_input()] = 1;
  starting_terminals_ = members(starting);

  std::vector<TerminalSet> after(terminals_.size(), TerminalSet(width, 0));
  for (const Rule& rule : rules_) {
    for (size_t i = 0; i < rule.rhs.size(); ++i) {
      if (!rule.rhs[i].terminal) continue;
      TerminalSet& next = after[rule.rhs[i].index];
      if (f.first_of(std::span(rule.rhs).subspan(i + 1), next)) merge_into(next, follow[rule.lhs]);
    }
  }
  followers_.clear();
  for (const TerminalSet& set : after) followers_.push_back(members(set));
}

}  // namespace k3::data
