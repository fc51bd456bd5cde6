#include "k3/data/grammar_parser.h"

#include "k3/base/error.h"

namespace k3::data {

std::vector<int> parse_terminals(const Grammar& grammar, std::span<const int> terminals) {
  std::vector<int> rules;
  std::vector<Symbol> stack = {{false, grammar.start()}};
  size_t position = 0;
  auto describe = [&](int t) {
    return t == grammar.end_of_input() ? std::string("the end of the input")
                                       : "'" + grammar.terminal(t) + "'";
  };
  while (!stack.empty()) {
    const Symbol top = stack.back();
    stack.pop_back();
    const int next = position < terminals.size() ? terminals[position] : grammar.end_of_input();
    if (top.terminal) {
      if (next != top.index)
        throw Error("parse: expected '" + grammar.terminal(top.index) + "' at terminal " +
                    std::to_string(position) + ", found " + describe(next));
      ++position;
      continue;
    }
    const int rule = grammar.predict(top.index, next);
    if (rule < 0)
      throw Error("parse: " + grammar.nonterminal(top.index) + " cannot continue with " +
                  describe(next) + " at terminal " + std::to_string(position));
    rules.push_back(rule);
    const std::vector<Symbol>& rhs = grammar.rules()[rule].rhs;
    stack.insert(stack.end(), rhs.rbegin(), rhs.rend());
  }
  if (position != terminals.size())
    throw Error("parse: a complete document ends at terminal " + std::to_string(position) + " of " +
                std::to_string(terminals.size()));
  return rules;
}

}  // namespace k3::data
