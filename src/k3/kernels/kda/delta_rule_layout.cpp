#include "k3/kernels/kda/delta_rule_layout.h"

#include "k3/base/error.h"
#include "k3/kernels/kda/chunk_tiles.h"

namespace k3::kernels::kda {

namespace layout {

HeadRows head_rows(const DeltaRuleShape& s, int64_t index) {
  const int64_t n = index / s.H, h = index % s.H;
  int64_t b = n, begin = 0, end = s.T;
  if (!s.doc_starts.empty()) {
    b = 0;
    begin = s.doc_starts[n];
    end = n + 1 < static_cast<int64_t>(s.doc_starts.size()) ? s.doc_starts[n + 1] : s.T;
  }
  const int64_t row = (b * s.T + begin) * s.H + h;
  return {.length = end - begin,
          .qk = row * s.K,
          .v = row * s.V,
          .beta = row,
          .state = index * s.K * s.V,
          .ldqk = s.H * s.K,
          .ldv = s.H * s.V,
          .ldbeta = s.H};
}

void check_shape(const char* kernel, const DeltaRuleShape& s) {
  K3_CHECK(s.B >= 0 && s.T >= 0 && s.H >= 1 && s.K >= 1 && s.V >= 1, kernel, ": bad shape B=", s.B,
           " T=", s.T, " H=", s.H, " K=", s.K, " V=", s.V);
  if (s.doc_starts.empty()) return;
  K3_CHECK(s.B == 1, kernel, ": doc_starts needs B == 1 (B=", s.B, ")");
  K3_CHECK(s.doc_starts[0] == 0, kernel, ": doc_starts must begin with 0 (got ", s.doc_starts[0],
           ")");
  for (size_t i = 1; i < s.doc_starts.size(); ++i)
    K3_CHECK(s.doc_starts[i] > s.doc_starts[i - 1] && s.doc_starts[i] < s.T, kernel,
             ": doc_starts[", i, "]=", s.doc_starts[i],
             " must be above the previous start and below T=", s.T);
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
