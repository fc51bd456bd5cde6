// A probabilistic context-free grammar over terminals (words, punctuation), built from tables and
// checked to be LL(1): at every choice point the next terminal (or the end of the input) names the
// rule that was taken. A terminal sequence therefore has at most one derivation, found by a
// one-token-lookahead parser, which is what makes the corpus's entropy computable exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace k3::data {

// "Lhs -> rhs" with an integer weight; rule probabilities are weight / (sum of weights of Lhs).
// rhs is space-separated: a bare name is a nonterminal (a production's lhs or a word class), a
// quoted 'text' is a terminal. An empty rhs derives nothing.
struct ProductionSpec {
  std::string_view lhs;
  uint32_t weight;
  std::string_view rhs;
};

// A nonterminal whose rules each emit one word. Word k (0-based) has weight kZipfScale / (k + 1),
// so earlier words are more frequent, roughly as in natural text.
struct WordClassSpec {
  std::string_view name;
  std::vector<std::string_view> words;
};

struct Symbol {
  bool terminal;
  int index;  // into terminals or nonterminals
};

struct Rule {
  int lhs;
  uint32_t weight;
  std::vector<Symbol> rhs;
};

// A leftmost derivation: the rules applied, in order, and the terminals it yields.
struct Derivation {
  std::vector<int> rules;
  std::vector<int> terminals;
};

// The space-separated parts of s (runs of spaces count as one separator).
std::vector<std::string_view> split_on_spaces(std::string_view s);

class Grammar {
 public:
  static constexpr uint32_t kZipfScale = 720720;

  // Throws a k3::Error naming the production or nonterminal at fault: an unknown symbol, a zero
  // weight, an empty or duplicated word class, an unreachable nonterminal, an LL(1) conflict.
  Grammar(std::span<const ProductionSpec> productions, std::span<const WordClassSpec> word_classes,
          std::string_view start);

  int num_terminals() const { return static_cast<int>(terminals_.size()); }
  int num_nonterminals() const { return static_cast<int>(nonterminals_.size()); }
  const std::string& terminal(int t) const { return terminals_[t]; }
  const std::string& nonterminal(int n) const { return nonterminals_[n]; }
  int find_terminal(std::string_view text) const;  // -1 when there is none
  int start() const { return start_; }
  int end_of_input() const { return num_terminals(); }  // the lookahead after the last terminal

  const std::vector<Rule>& rules() const { return rules_; }
  // The rules of a nonterminal are the ids first_rule(n) .. first_rule(n + 1) - 1.
  int first_rule(int nonterminal) const { return first_rule_[nonterminal]; }
  uint64_t total_weight(int nonterminal) const { return total_weight_[nonterminal]; }
  double probability(int rule) const;
  // The rule of `nonterminal` whose share of [0, total_weight) holds r.
  int rule_at(int nonterminal, uint64_t r) const;
  std::string rule_text(int rule) const;  // "Lhs -> A 'b' C"

  // The rule to expand `nonterminal` with when the next terminal is `lookahead`; -1 for none.
  int predict(int nonterminal, int lookahead) const {
    return predict_[static_cast<size_t>(nonterminal) * (terminals_.size() + 1) + lookahead];
  }
  // Terminals (or end_of_input()) that can begin a derivation of the start symbol.
  const std::vector<int>& starting_terminals() const { return starting_terminals_; }
  // Terminals (or end_of_input()) that can come right after terminal t.
  const std::vector<int>& followers(int t) const { return followers_[t]; }

 private:
  void add_rules(std::span<const ProductionSpec> productions,
                 std::span<const WordClassSpec> word_classes);
  int intern_terminal(std::string_view text);
  void check_reachable() const;
  void analyse_lookahead();

  std::vector<std::string> terminals_;
  std::unordered_map<std::string, int> terminal_ids_;
  std::vector<std::string> nonterminals_;
  std::vector<Rule> rules_;
  std::vector<int> first_rule_;
  std::vector<uint64_t> cumulative_weight_;  // per rule, within its nonterminal, inclusive
  std::vector<uint64_t> total_weight_;
  int start_ = -1;
  std::vector<int> predict_;
  std::vector<int> starting_terminals_;
  std::vector<std::vector<int>> followers_;
};

}  // namespace k3::data
