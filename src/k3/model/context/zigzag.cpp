#include "k3/model/context/zigzag.h"

#include "k3/base/error.h"

namespace k3::model {

TokenBatch context_share(const TokenBatch& b, int ranks, int rank, std::vector<int32_t>& buffer) {
  if (ranks == 1) return b;
  K3_CHECK_CTX(b.doc_starts.empty() || b.B == 1, (ErrorContext{"", "data.documents", -1}),
               "packed documents under context parallelism take one sequence a rank's "
               "micro-batch, not ",
               b.B, " (train.batch_size / (dp·ep))");
  K3_CHECK(b.T % (2 * ranks) == 0, "context parallelism cuts each sequence into 2·cp = ", 2 * ranks,
           " chunks: a sequence of ", b.T, " tokens does not split evenly");
  const int64_t C = b.T / (2 * ranks);
  buffer.clear();
  for (const int32_t* src : {b.tokens, b.targets}) {
    if (!src) continue;
    for (int64_t row = 0; row < b.B; ++row)
      for (int64_t chunk : {int64_t{rank}, int64_t{2 * ranks - 1 - rank}})
        buffer.insert(buffer.end(), src + row * b.T + chunk * C, src + row * b.T + (chunk + 1) * C);
  }
  return {buffer.data(), b.targets ? buffer.data() + b.B * 2 * C : nullptr, b.B, 2 * C,
          b.doc_starts};
}

}  // namespace k3::model
