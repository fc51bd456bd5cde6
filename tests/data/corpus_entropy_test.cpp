#include "k3/data/corpus_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "k3/data/corpus.h"

namespace k3::data {

// The exact floor against a Monte Carlo estimate: the average of -log p(derivation) per token
// over sampled documents (a ratio estimate; its standard error by the delta method).
TEST(CorpusEntropy, ExactFloorMatchesSampledDocuments) {
  const Corpus corpus(2024);
  const int n = 20000;
  std::vector<double> nats(n), tokens(n);
  for (int i = 0; i < n; ++i) {
    const Derivation d = corpus.derivation(i);
    for (int r : d.rules) nats[i] -= std::log(corpus.grammar().probability(r));
    tokens[i] = static_cast<double>(corpus.text_form().render(d.terminals).size()) + 1;  // + eos
  }
  double sum_nats = 0, sum_tokens = 0;
  for (int i = 0; i < n; ++i) sum_nats += nats[i], sum_tokens += tokens[i];
  const double estimate = sum_nats / sum_tokens;
  double residuals = 0;
  for (int i = 0; i < n; ++i) residuals += std::pow(nats[i] - estimate * tokens[i], 2);
  const double standard_error = std::sqrt(residuals / (n - 1.0) / n) / (sum_tokens / n);

  const double exact = corpus_entropy_nats_per_token();
  std::printf("entropy floor %.9f nats/token, sampled %.6f +- %.6f\n", exact, estimate,
              standard_error);
  EXPECT_LT(std::abs(estimate - exact), 4 * standard_error);
  EXPECT_LT(std::abs(estimate - exact), 0.005 * exact);  // the stated tolerance: 0.5%

  const CorpusEntropy e = corpus_entropy(corpus.grammar(), corpus.text_form());
  EXPECT_NEAR(sum_tokens / n, e.tokens_per_document, 0.02 * e.tokens_per_document);
  EXPECT_DOUBLE_EQ(e.nats_per_token, exact);
  EXPECT_DOUBLE_EQ(e.tokens_per_document, e.bytes_per_document + 1);
}

TEST(CorpusEntropy, FloorIsStable) {
  // The value documented in docs/data.md; a grammar edit that changes it must update the docs.
  EXPECT_NEAR(corpus_entropy_nats_per_token(), 0.650579, 1e-6);
}

}  // namespace k3::data
