// The sequences of a KDA batch: each batch row is one sequence, or (B = 1) the row holds packed
// documents whose first tokens doc_starts lists, starting with 0 (cu_seqlens without the final T).
// Recurrent state and convolution windows restart at every sequence start.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "k3/base/error.h"

namespace k3::kernels::kda {

struct SequenceRange {
  int64_t begin, length;  // in rows of the [B*T, ...] token layout
};

inline int64_t num_sequences(int64_t B, std::span<const int64_t> doc_starts) {
  return doc_starts.empty() ? B : static_cast<int64_t>(doc_starts.size());
}

inline SequenceRange sequence_range(int64_t T, std::span<const int64_t> doc_starts, int64_t n) {
  if (doc_starts.empty()) return {n * T, T};
  const size_t i = static_cast<size_t>(n);
  const int64_t end = i + 1 < doc_starts.size() ? doc_starts[i + 1] : T;
  return {doc_starts[i], end - doc_starts[i]};
}

// Throws unless doc_starts is empty or (B = 1) starts at 0 and increases strictly below T. A
// kernel name, when given, begins the message.
inline void check_doc_starts(int64_t B, int64_t T, std::span<const int64_t> doc_starts,
                             std::string_view kernel = {}) {
  if (doc_starts.empty()) return;
  const ErrorContext ctx{"", "doc_starts", -1};
  const std::string_view sep = kernel.empty() ? "" : ": ";
  K3_CHECK_CTX(B == 1, ctx, kernel, sep, "packed documents need a batch of one row, found B = ", B);
  K3_CHECK_CTX(doc_starts[0] == 0, ctx, kernel, sep, "the first document must start at 0, found ",
               doc_starts[0]);
  for (size_t i = 1; i < doc_starts.size(); ++i)
    K3_CHECK_CTX(doc_starts[i] > doc_starts[i - 1] && doc_starts[i] < T, ctx, kernel, sep,
                 "expected strictly increasing starts below T = ", T, ", found ", doc_starts[i],
                 " after ", doc_starts[i - 1]);
}

}  // namespace k3::kernels::kda
