#include "k3/data/grammar.h"

#include <algorithm>

#include "k3/base/error.h"

namespace k3::data {
namespace {

Error grammar_error(std::string_view nonterminal, const std::string& what) {
  return Error("grammar: " + what, ErrorContext{"", std::string(nonterminal), -1});
}

}  // namespace

std::vector<std::string_view> split_on_spaces(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = s.find(' ', i);
    if (j == std::string_view::npos) j = s.size();
    parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

Grammar::Grammar(std::span<const ProductionSpec> productions,
                 std::span<const WordClassSpec> word_classes, std::string_view start) {
  add_rules(productions, word_classes);
  auto it = std::find(nonterminals_.begin(), nonterminals_.end(), start);
  if (it == nonterminals_.end()) throw grammar_error(start, "the start symbol has no rules");
  start_ = static_cast<int>(it - nonterminals_.begin());
  check_reachable();
  analyse_lookahead();
}

void Grammar::add_rules(std::span<const ProductionSpec> productions,
                        std::span<const WordClassSpec> word_classes) {
  std::unordered_map<std::string, int> ids;
  auto define = [&](std::string_view name) {
    auto [it, fresh] = ids.emplace(std::string(name), static_cast<int>(nonterminals_.size()));
    if (fresh) nonterminals_.emplace_back(name);
    return it->second;
  };
  for (const ProductionSpec& p : productions) define(p.lhs);
  for (const WordClassSpec& c : word_classes) {
    if (ids.count(std::string(c.name)))
      throw grammar_error(c.name, "a word class is defined twice or also has productions");
    if (c.words.empty()) throw grammar_error(c.name, "a word class needs at least one word");
    define(c.name);
  }

  for (const ProductionSpec& p : productions) {
    if (p.weight == 0)
      throw grammar_error(p.lhs,
                          "production '" + std::string(p.rhs) + "' has weight 0, expected >= 1");
    Rule rule{ids.at(std::string(p.lhs)), p.weight, {}};
    for (std::string_view part : split_on_spaces(p.rhs)) {
      if (part.size() >= 3 && part.front() == '\'' && part.back() == '\'') {
        rule.rhs.push_back({true, intern_terminal(part.substr(1, part.size() - 2))});
      } else if (auto it = ids.find(std::string(part)); it != ids.end()) {
        rule.rhs.push_back({false, it->second});
      } else {
        throw grammar_error(p.lhs, "unknown symbol '" + std::string(part) +
                                       "' (expected a nonterminal or a quoted 'terminal')");
      }
    }
    rules_.push_back(std::move(rule));
  }
  for (const WordClassSpec& c : word_classes) {
    const int lhs = ids.at(std::string(c.name));
    for (size_t k = 0; k < c.words.size(); ++k) {
      rules_.push_back({lhs,
                        static_cast<uint32_t>(kZipfScale / (k + 1)),
                        {{true, intern_terminal(c.words[k])}}});
    }
  }

  // Group the rules by nonterminal, keeping their listed order within each.
  std::stable_sort(rules_.begin(), rules_.end(),
                   [](const Rule& a, const Rule& b) { return a.lhs < b.lhs; });
  first_rule_.assign(nonterminals_.size() + 1, 0);
  total_weight_.assign(nonterminals_.size(), 0);
  cumulative_weight_.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    const int lhs = rules_[r].lhs;
    total_weight_[lhs] += rules_[r].weight;
    cumulative_weight_[r] = total_weight_[lhs];
    first_rule_[lhs + 1] = static_cast<int>(r + 1);
  }
}

int Grammar::intern_terminal(std::string_view text) {
  auto [it, fresh] = terminal_ids_.emplace(std::string(text), static_cast<int>(terminals_.size()));
  if (fresh) terminals_.emplace_back(text);
  return it->second;
}

int Grammar::find_terminal(std::string_view text) const {
  auto it = terminal_ids_.find(std::string(text));
  return it == terminal_ids_.end() ? -1 : it->second;
}

void Grammar::check_reachable() const {
  std::vector<char> reached(nonterminals_.size(), 0);
  std::vector<int> todo = {start_};
  reached[start_] = 1;
  while (!todo.empty()) {
    const int n = todo.back();
    todo.pop_back();
    for (int r = first_rule(n); r < first_rule(n + 1); ++r)
      for (const Symbol& s : rules_[r].rhs)
        if (!s.terminal && !reached[s.index]) {
          reached[s.index] = 1;
          todo.push_back(s.index);
        }
  }
  for (size_t n = 0; n < nonterminals_.size(); ++n)
    if (!reached[n]) throw grammar_error(nonterminals_[n], "unreachable from the start symbol");
}

double Grammar::probability(int rule) const {
  return static_cast<double>(rules_[rule].weight) /
         static_cast<double>(total_weight_[rules_[rule].lhs]);
}

int Grammar::rule_at(int nonterminal, uint64_t r) const {
  auto begin = cumulative_weight_.begin() + first_rule(nonterminal);
  auto end = cumulative_weight_.begin() + first_rule(nonterminal + 1);
  return static_cast<int>(std::upper_bound(begin, end, r) - cumulative_weight_.begin());
}

std::string Grammar::rule_text(int rule) const {
  std::string text = nonterminals_[rules_[rule].lhs] + " ->";
  for (const Symbol& s : rules_[rule].rhs) {
    text += ' ';
    text += s.terminal ? "'" + terminals_[s.index] + "'" : nonterminals_[s.index];
  }
  return text;
}

}  // namespace k3::data
