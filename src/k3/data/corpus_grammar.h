// The built-in corpus's grammar: a few hundred English words in word classes and the productions
// that arrange them into sentences, paragraphs and documents (tables in corpus_grammar.cpp).
#pragma once

#include "k3/data/grammar.h"

namespace k3::data {

// Built once, on first use; checked to be LL(1) (see grammar.h).
const Grammar& builtin_grammar();

}  // namespace k3::data
