#include "k3/kernels/kda/delta_rule_layout.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/kernels/kda/chunk_tiles.h"

namespace k3::kernels::kda {

namespace layout {

HeadRows head_rows(const DeltaRuleShape& s, int64_t index) {
  const int64_t h = index % s.H;
  const SequenceRange seq = sequence_range(s.T, s.doc_starts, index / s.H);
  const int64_t row = seq.begin * s.H + h;
  return {.length = seq.length,
          .qk = row * s.K,
          .v = row * s.V,
          .beta = row,
          .state = index * s.K * s.V,
          .ldqk = s.H * s.K,
          .ldv = s.H * s.V,
          .ldbeta = s.H};
}

HeadGroups head_groups(const DeltaRuleShape& s, int threads) {
  const int64_t N = s.num_sequences();
  // Enough groups per sequence for every thread to get one, at most one per head.
  const int64_t wanted = std::min(s.H, N > 0 ? (threads + N - 1) / N : int64_t{1});
  const int64_t size = (s.H + wanted - 1) / wanted;
  const int64_t per_sequence = (s.H + size - 1) / size;
  return {.size = size, .count = N * per_sequence, .per_sequence = per_sequence};
}

void check_shape(const char* kernel, const DeltaRuleShape& s) {
  K3_CHECK(s.B >= 0 && s.T >= 0 && s.H >= 1 && s.K >= 1 && s.V >= 1, kernel, ": bad shape B=", s.B,
           " T=", s.T, " H=", s.H, " K=", s.K, " V=", s.V);
  check_doc_starts(s.B, s.T, s.doc_starts, kernel);
}

void check_pointers(const char* kernel, const DeltaRuleShape& s, const void* q, const void* k,
                    const void* v, const void* g, const void* beta) {
  K3_CHECK(s.B * s.T == 0 || (q && k && v && g && beta), kernel,
           ": q, k, v, g and beta (or their gradients) are required");
}

std::vector<int64_t> first_chunks(const DeltaRuleShape& s) {
  const int64_t N = s.num_sequences();
  std::vector<int64_t> first(static_cast<size_t>(N + 1), 0);
  for (int64_t n = 0; n < N; ++n)
    first[n + 1] = first[n] + num_chunks(head_rows(s, n * s.H).length);
  return first;
}

int64_t chunk_record_floats(const DeltaRuleShape& s) {
  return s.K * s.V + chunk::ChunkProducts::floats(s.V);
}

}  // namespace layout

int64_t chunk_saved_floats(const DeltaRuleShape& s) {
  layout::check_shape("kda chunk_saved_floats", s);
  return layout::first_chunks(s).back() * s.H * layout::chunk_record_floats(s);
}

}  // namespace k3::kernels::kda
