#include "k3/kernels/embedding.h"

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using testing::cast_vec;
using testing::random_tokens;
using testing::random_vec;

TEST(Embedding, ForwardCopiesRows) {
  for (auto [n, vocab, dim] :
       {std::tuple<int64_t, int32_t, int64_t>{1, 1, 1}, {5, 3, 7}, {300, 50, 33}}) {
    const auto tok = random_tokens(n, vocab, n);
    const auto table = random_vec(vocab * dim, 1);
    std::vector<float> out(n * dim), out_r(n * dim);
    kernels::embedding_forward(tok.data(), n, table.data(), vocab, dim, out.data());
    ref::embedding_forward<float>(tok.data(), n, table.data(), dim, out_r.data());
    EXPECT_EQ(out, out_r);
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndReference) {
  const int64_t n = 9, vocab = 4, dim = 5;  // few ids: rows repeat
  const auto tok = random_tokens(n, vocab, 7);
  const auto R = random_vec<double>(n * dim, 8);  // loss = <out, R>
  auto loss = [&](const std::vector<double>& table) {
    std::vector<double> out(n * dim);
    ref::embedding_forward<double>(tok.data(), n, table.data(), dim, out.data());
    return testing::dot(out, R);
  };
  const auto fd = testing::finite_difference(loss, random_vec<double>(vocab * dim, 9));
  std::vector<double> grad_r(vocab * dim, 0.0);
  ref::embedding_backward<double>(tok.data(), n, R.data(), dim, grad_r.data());
  K3_EXPECT_CLOSE(grad_r, fd, 1e-8, 1e-6);

  const auto init = random_vec(vocab * dim, 10);  // backward accumulates
  auto grad = init;
  kernels::embedding_backward(tok.data(), n, cast_vec<float>(R).data(), vocab, dim, grad.data());
  for (size_t i = 0; i < grad_r.size(); ++i) grad_r[i] += init[i];
  K3_EXPECT_CLOSE(grad, grad_r, 1e-6, 1e-6);
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  const int64_t n = 2048, vocab = 40, dim = 97;  // large enough to run in parallel
  const auto tok = random_tokens(n, vocab, 3);
  const auto dout = random_vec(n * dim, 4);
  std::vector<float> one(vocab * dim, 0.0f), two(vocab * dim, 0.0f), again(vocab * dim, 0.0f);
  {
    testing::ScopedThreads t(1);
    kernels::embedding_backward(tok.data(), n, dout.data(), vocab, dim, one.data());
  }
  {
    testing::ScopedThreads t(2);
    kernels::embedding_backward(tok.data(), n, dout.data(), vocab, dim, two.data());
    kernels::embedding_backward(tok.data(), n, dout.data(), vocab, dim, again.data());
  }
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, again);
}

// Vocabulary shards: the shards' outputs sum to the whole table's, and each shard's gradient is
// its rows of the whole table's gradient.
TEST(Embedding, ShardsOfTheVocabularySumToTheWholeTable) {
  const int64_t n = 40, vocab = 12, dim = 6;
  const auto tok = random_tokens(n, vocab, 5);
  const auto table = random_vec(vocab * dim, 6), dout = random_vec(n * dim, 7);
  std::vector<float> want(n * dim), want_grad(vocab * dim, 0.f);
  kernels::embedding_forward(tok.data(), n, table.data(), vocab, dim, want.data());
  kernels::embedding_backward(tok.data(), n, dout.data(), vocab, dim, want_grad.data());
  for (int64_t shards : {2, 3, 4}) {
    const int64_t rows = vocab / shards;
    std::vector<float> sum(n * dim, 0.f), part(n * dim);
    for (int64_t k = 0; k < shards; ++k) {
      const kernels::VocabShard shard{k * rows, rows};
      kernels::embedding_forward(tok.data(), n, table.data() + k * rows * dim, vocab, dim,
                                 part.data(), shard);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      std::vector<float> grad(rows * dim, 0.f);
      kernels::embedding_backward(tok.data(), n, dout.data(), vocab, dim, grad.data(), shard);
      EXPECT_EQ(grad, std::vector<float>(want_grad.begin() + k * rows * dim,
                                         want_grad.begin() + (k + 1) * rows * dim))
          << shards << " shards, shard " << k;
    }
    EXPECT_EQ(sum, want) << shards << " shards";
  }
}

TEST(Embedding, RejectsOutOfRangeToken) {
  const std::vector<int32_t> tok = {0, 3};
  std::vector<float> table(6), out(4);
  EXPECT_THROW(kernels::embedding_forward(tok.data(), 2, table.data(), 3, 2, out.data()), Error);
  EXPECT_THROW(kernels::embedding_backward(tok.data(), 2, out.data(), 3, 2, table.data()), Error);
}

}  // namespace
}  // namespace k3
