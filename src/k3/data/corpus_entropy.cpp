#include "k3/data/corpus_entropy.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/data/corpus_grammar.h"

namespace k3::data {

ExpectedCounts expected_counts(const Grammar& grammar) {
  // The expected expansion counts n solve n = e_start + M^T n, M[A][B] being the expected number
  // of B in one expansion of A. Iterating from 0 increases monotonically (in floating point too:
  // the sums are nonnegative and always taken in the same order) to the least solution, which is
  // the expectation; it stops when an iteration changes nothing at all.
  const int num = grammar.num_nonterminals();
  std::vector<double> n(num, 0.0), next(num);
  constexpr int kMaxIterations = 1000000;
  for (int iteration = 0;; ++iteration) {
    if (iteration == kMaxIterations)
      throw Error(
          "grammar: the expected size of a derivation is infinite (rules recurse too often)",
          ErrorContext{"", grammar.nonterminal(grammar.start()), -1});
    std::fill(next.begin(), next.end(), 0.0);
    next[grammar.start()] = 1.0;
    for (size_t r = 0; r < grammar.rules().size(); ++r) {
      const Rule& rule = grammar.rules()[r];
      const double uses = n[rule.lhs] * grammar.probability(static_cast<int>(r));
      for (const Symbol& s : rule.rhs)
        if (!s.terminal) next[s.index] += uses;
    }
    if (next == n) break;
    n.swap(next);
  }
  for (int a = 0; a < num; ++a)
    if (!std::isfinite(n[a]))
      throw Error(
          "grammar: the expected number of expansions is infinite (rules recurse too often)",
          ErrorContext{"", grammar.nonterminal(a), -1});

  ExpectedCounts counts{n, std::vector<double>(grammar.num_terminals(), 0.0)};
  for (size_t r = 0; r < grammar.rules().size(); ++r) {
    const Rule& rule = grammar.rules()[r];
    const double uses = n[rule.lhs] * grammar.probability(static_cast<int>(r));
    for (const Symbol& s : rule.rhs)
      if (s.terminal) counts.terminals[s.index] += uses;
  }
  return counts;
}

double choice_entropy(const Grammar& grammar, int nonterminal) {
  double h = 0;
  for (int r = grammar.first_rule(nonterminal); r < grammar.first_rule(nonterminal + 1); ++r) {
    const double p = grammar.probability(r);
    h -= p * std::log(p);
  }
  return h;
}

CorpusEntropy corpus_entropy(const Grammar& grammar, const CorpusText& text) {
  const ExpectedCounts counts = expected_counts(grammar);
  CorpusEntropy e{0, -1, 0, 0};  // bytes: the first word of a document has no space before it
  for (int n = 0; n < grammar.num_nonterminals(); ++n)
    e.nats_per_document += counts.expansions[n] * choice_entropy(grammar, n);
  for (int t = 0; t < grammar.num_terminals(); ++t)
    e.bytes_per_document += counts.terminals[t] * text.charged_bytes(t);
  e.tokens_per_document = e.bytes_per_document + 1;
  e.nats_per_token = e.nats_per_document / e.tokens_per_document;
  return e;
}

double corpus_entropy_nats_per_token() {
  static const double floor =
      corpus_entropy(builtin_grammar(), CorpusText(builtin_grammar())).nats_per_token;
  return floor;
}

}  // namespace k3::data
