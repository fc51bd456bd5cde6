#include "k3/data/grammar.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/data/corpus_entropy.h"
#include "k3/data/corpus_grammar.h"
#include "k3/data/corpus_text.h"
#include "k3/data/grammar_parser.h"

namespace k3::data {
namespace {

std::string error_of(const std::vector<ProductionSpec>& productions,
                     const std::vector<WordClassSpec>& classes = {}) {
  try {
    Grammar g(productions, classes, "S");
    CorpusText text(g);
    expected_counts(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(Grammar, BuildsRulesAndWordClasses) {
  const std::vector<ProductionSpec> productions = {{"S", 1, "W 'x'"}, {"S", 3, "'y'"}};
  const std::vector<WordClassSpec> classes = {{"W", {"one", "two", "three"}}};
  Grammar g(productions, classes, "S");
  EXPECT_EQ(g.num_nonterminals(), 2);
  EXPECT_EQ(g.num_terminals(), 5);
  EXPECT_DOUBLE_EQ(g.probability(g.first_rule(g.start()) + 1), 0.75);
  const int w = g.rules()[g.first_rule(g.start())].rhs[0].index;
  // Zipf weights: 1 : 1/2 : 1/3.
  EXPECT_DOUBLE_EQ(g.probability(g.first_rule(w)), 6.0 / 11.0);
  EXPECT_DOUBLE_EQ(g.probability(g.first_rule(w) + 2), 2.0 / 11.0);
  EXPECT_EQ(g.rule_text(g.first_rule(g.start())), "S -> W 'x'");
  EXPECT_EQ(g.rule_at(g.start(), 0), g.first_rule(g.start()));
  EXPECT_EQ(g.rule_at(g.start(), 1), g.first_rule(g.start()) + 1);
}

TEST(Grammar, RejectsBadTables) {
  EXPECT_TRUE(contains(error_of({{"S", 1, "'a' Missing"}}), "unknown symbol 'Missing'"));
  EXPECT_TRUE(contains(error_of({{"S", 0, "'a'"}}), "weight 0"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "'a'"}, {"T", 1, "'b'"}}), "unreachable"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "'a'"}, {"S", 1, "'a' 'b'"}}), "not LL(1)"));
  // The choice between stopping and going on must be visible in the next word.
  EXPECT_TRUE(
      contains(error_of({{"S", 1, "Opt 'a'"}, {"Opt", 1, "'a'"}, {"Opt", 1, ""}}), "not LL(1)"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "W"}}, {{"W", {"same", "same"}}}), "not LL(1)"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "W"}}, {{"W", {}}}), "at least one word"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "'anna' 'Anna'"}}), "capitalizes like"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "'a-b'"}}), "expected a word"));
  EXPECT_TRUE(contains(error_of({{"S", 1, "'.' 'a'"}}), "start with a word"));
  // Each expansion of S makes 4/3 copies of S on average: derivations are infinite on average.
  EXPECT_TRUE(contains(error_of({{"S", 2, "'a' S S"}, {"S", 1, "'b'"}}), "infinite"));
}

TEST(Grammar, ParserRecoversDerivations) {
  const std::vector<ProductionSpec> productions = {
      {"S", 1, "'a' S"}, {"S", 2, "'b' T"}, {"T", 1, "'c'"}, {"T", 1, ""}};
  Grammar g(productions, {}, "S");
  const int a = g.find_terminal("a"), b = g.find_terminal("b"), c = g.find_terminal("c");
  const std::vector<int> rules = parse_terminals(g, std::vector<int>{a, a, b, c});
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(g.rule_text(rules[0]), "S -> 'a' S");
  EXPECT_EQ(g.rule_text(rules[2]), "S -> 'b' T");
  EXPECT_EQ(g.rule_text(rules[3]), "T -> 'c'");
  EXPECT_THROW(parse_terminals(g, std::vector<int>{a, c}), Error);
  EXPECT_THROW(parse_terminals(g, std::vector<int>{b, c, c}), Error);
  EXPECT_THROW(parse_terminals(g, std::vector<int>{a}), Error);
}

// S -> 'a' S | 'b' with probability 1/2 each: the number of a's is geometric with mean 1, so S is
// expanded twice on average, each time with one bit of entropy, and the text "a a b" has
// 2 * (a's + 1) - 1 bytes, 3 on average.
TEST(Grammar, ExpectationsOfAGeometricGrammar) {
  const std::vector<ProductionSpec> productions = {{"S", 1, "'a' S"}, {"S", 1, "'b'"}};
  Grammar g(productions, {}, "S");
  const ExpectedCounts counts = expected_counts(g);
  EXPECT_DOUBLE_EQ(counts.expansions[g.start()], 2.0);
  EXPECT_DOUBLE_EQ(counts.terminals[g.find_terminal("a")], 1.0);
  EXPECT_DOUBLE_EQ(counts.terminals[g.find_terminal("b")], 1.0);
  const CorpusEntropy e = corpus_entropy(g, CorpusText(g));
  EXPECT_DOUBLE_EQ(e.nats_per_document, 2 * std::log(2.0));
  EXPECT_DOUBLE_EQ(e.bytes_per_document, 3.0);
  EXPECT_DOUBLE_EQ(e.nats_per_token, 2 * std::log(2.0) / 4.0);
}

TEST(Grammar, BuiltinIsAFewHundredWords) {
  const Grammar& g = builtin_grammar();
  int words = 0;
  for (int t = 0; t < g.num_terminals(); ++t)
    words += std::isalpha(static_cast<unsigned char>(g.terminal(t)[0])) != 0;
  EXPECT_GT(words, 300);
  EXPECT_LT(words, 1000);
}

}  // namespace k3::data
