// The exact entropy of the built-in corpus, so a trainer can report loss minus its floor.
//
// The grammar is LL(1) and the text form is invertible, so a document's text (with its closing
// eos) determines its derivation and vice versa: H(document) = H(derivation) = the expected sum,
// over the choices made, of the entropy of each choice's rule distribution. With documents i.i.d.
// and each closed by eos, the token stream's entropy rate, i.e. the mean over positions of
// H(next token | the whole past), is E[H(derivation)] / E[tokens per document]. Both expectations
// are computed from the grammar (expected expansion counts, a fixed point of the grammar's mean
// matrix), not by sampling. A model that sees a finite context can only do worse than this floor.
#pragma once

#include <vector>

#include "k3/data/corpus_text.h"
#include "k3/data/grammar.h"

namespace k3::data {

// Expected number of times, in one derivation of the start symbol, each nonterminal is expanded
// and each terminal is emitted. Throws a k3::Error when a derivation's expected size is infinite.
struct ExpectedCounts {
  std::vector<double> expansions;  // per nonterminal
  std::vector<double> terminals;   // per terminal
};
ExpectedCounts expected_counts(const Grammar& grammar);

// Entropy of a nonterminal's rule distribution, in nats.
double choice_entropy(const Grammar& grammar, int nonterminal);

struct CorpusEntropy {
  double nats_per_document;    // E[-log p(derivation)]
  double bytes_per_document;   // E[bytes of a document's text]
  double tokens_per_document;  // byte tokens plus the closing eos
  double nats_per_token;       // the floor: nats_per_document / tokens_per_document
};
CorpusEntropy corpus_entropy(const Grammar& grammar, const CorpusText& text);

// The built-in corpus's floor for the byte tokenizer's eos-separated stream, in nats per token.
double corpus_entropy_nats_per_token();

}  // namespace k3::data
