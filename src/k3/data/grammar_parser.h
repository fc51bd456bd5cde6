// Recovers the derivation of a terminal sequence with the grammar's LL(1) predict table.
#pragma once

#include <span>
#include <vector>

#include "k3/data/grammar.h"

namespace k3::data {

// The rules of the leftmost derivation of `terminals` from the start symbol, in the order a
// generator expanding depth-first would have chosen them. Throws a k3::Error giving the position
// of the first terminal that no derivation allows.
std::vector<int> parse_terminals(const Grammar& grammar, std::span<const int> terminals);

}  // namespace k3::data
