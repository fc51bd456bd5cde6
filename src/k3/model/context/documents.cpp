#include "k3/model/context/documents.h"

#include <algorithm>

namespace k3::model {

std::vector<DocumentRun> document_runs(std::span<const int64_t> docs, int64_t first,
                                       int64_t length) {
  std::vector<DocumentRun> runs{{0, length, 0}};
  for (int64_t d : docs) {
    if (d <= first) {
      runs.back().start = d;
    } else if (d < first + length) {
      runs.back().end = d - first;
      runs.push_back({d - first, length, d});
    }
  }
  return runs;
}

void run_lse(const float* lse, int64_t H, int64_t T, const DocumentRun& r, float* part) {
  const int64_t n = r.end - r.begin;
  for (int64_t h = 0; h < H; ++h) std::copy_n(lse + h * T + r.begin, n, part + h * n);
}

void put_run_lse(float* lse, int64_t H, int64_t T, const DocumentRun& r, const float* part) {
  const int64_t n = r.end - r.begin;
  for (int64_t h = 0; h < H; ++h) std::copy_n(part + h * n, n, lse + h * T + r.begin);
}

}  // namespace k3::model
