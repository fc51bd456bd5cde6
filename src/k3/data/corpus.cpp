#include "k3/data/corpus.h"

#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/data/corpus_grammar.h"
#include "k3/data/grammar_parser.h"
#include "k3/data/random_draws.h"

namespace k3::data {

Corpus::Corpus(uint64_t seed) : seed_(seed), grammar_(builtin_grammar()), text_(grammar_) {}

Derivation Corpus::derivation(int64_t index) const {
  K3_CHECK(index >= 0, "corpus document index must be >= 0, got ", index);
  static const uint64_t kDomain = stream_of("k3.data.corpus");
  RandomDraws draws(seed_ ^ kDomain, static_cast<uint64_t>(index));
  Derivation d;
  std::vector<Symbol> stack = {{false, grammar_.start()}};
  while (!stack.empty()) {
    const Symbol top = stack.back();
    stack.pop_back();
    if (top.terminal) {
      d.terminals.push_back(top.index);
      continue;
    }
    const int rule = grammar_.rule_at(top.index, draws.below(grammar_.total_weight(top.index)));
    d.rules.push_back(rule);
    const std::vector<Symbol>& rhs = grammar_.rules()[rule].rhs;
    stack.insert(stack.end(), rhs.rbegin(), rhs.rend());
  }
  return d;
}

std::string Corpus::document(int64_t index) const {
  return text_.render(derivation(index).terminals);
}

Derivation Corpus::parse(std::string_view document) const {
  Derivation d;
  d.terminals = text_.read(document);
  d.rules = parse_terminals(grammar_, d.terminals);
  // Reading skips spaces freely; only the exact rendering counts as this corpus's text.
  K3_CHECK(text_.render(d.terminals) == document,
           "corpus text: the words parse, but the spacing or capitalization "
           "differs from what the corpus writes");
  return d;
}

std::string Corpus::text(int64_t num_bytes) const {
  K3_CHECK(num_bytes >= 0, "corpus text size must be >= 0, got ", num_bytes);
  std::string out;
  for (int64_t i = 0; static_cast<int64_t>(out.size()) < num_bytes; ++i) {
    text_.render(derivation(i).terminals, out);
    out += "\n\n";
  }
  out.resize(num_bytes);
  return out;
}

std::vector<int32_t> Corpus::tokens(int64_t num_tokens, const Tokenizer& tokenizer) const {
  K3_CHECK(num_tokens >= 0, "corpus token count must be >= 0, got ", num_tokens);
  std::vector<int32_t> out;
  out.reserve(num_tokens);
  for (int64_t i = 0; static_cast<int64_t>(out.size()) < num_tokens; ++i) {
    const std::vector<int32_t> ids = tokenizer.encode(document(i));
    out.insert(out.end(), ids.begin(), ids.end());
    out.push_back(tokenizer.eos_id());
  }
  out.resize(num_tokens);
  return out;
}

}  // namespace k3::data
