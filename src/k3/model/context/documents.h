// Packed documents in attention: a query sees only the keys of its own document. Over a range of
// positions the queries fall into runs, one per document met, each knowing where its document
// starts; attention then runs per run, on a causal diagonal or against the keys of an earlier
// block from the document's start on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3::model {

struct DocumentRun {
  int64_t begin = 0, end = 0;  // rows [begin, end) of the range
  int64_t start = 0;           // the global position where the run's document starts
};

// The runs over global positions [first, first + length); docs are the sequence's document starts
// (global, from 0), empty for one document.
std::vector<DocumentRun> document_runs(std::span<const int64_t> docs, int64_t first,
                                       int64_t length);

// A run's rows of lse [H, T] as [H, n] (into `part`), and back.
void run_lse(const float* lse, int64_t H, int64_t T, const DocumentRun& r, float* part);
void put_run_lse(float* lse, int64_t H, int64_t T, const DocumentRun& r, const float* part);

}  // namespace k3::model
