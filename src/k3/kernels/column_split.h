// Splits columns between the threads of the enclosing OpenMP parallel region, in whole cache lines,
// for reductions over rows that must not depend on the thread count: each column is summed over
// rows in order by the one thread that owns it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace k3::kernels {

struct ColumnRange {
  int64_t begin, end;
};

// This thread's columns of [0, dim). Call inside a parallel region.
inline ColumnRange thread_columns(int64_t dim) {
  constexpr int64_t kLine = 16;  // floats per 64-byte cache line
  const int64_t lines = (dim + kLine - 1) / kLine;
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
  return {std::min(dim, lines * t / nt * kLine), std::min(dim, lines * (t + 1) / nt * kLine)};
}

}  // namespace k3::kernels
