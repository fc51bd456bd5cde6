// Long-context evaluation: a model answers a task when, fed the document (teacher forcing), its
// greedy choice at each answer position is the answer's token. Accuracy is reported by context
// length and by answer depth, as a table and as a heatmap.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "k3/base/svg_plot.h"
#include "k3/data/longctx/task.h"
#include "k3/train/session.h"

namespace k3::train {

// Whether PREDICTED (the greedy token at each of the task's answer positions) is the answer.
bool predicts_answer(const data::LongTask& task, std::span<const int32_t> predicted);
// How many of the answer's tokens PREDICTED has right, position by position: a finer signal
// than whole answers, which a small model rarely gets all of.
int64_t answer_tokens_right(const data::LongTask& task, std::span<const int32_t> predicted);

// The model's greedy tokens at the task's answer positions: the document up to the answer is fed
// through the model's decode path, then each answer token (the truth, not the prediction).
std::vector<int32_t> greedy_answer_tokens(Session& s, const data::LongTask& task);

struct LongTaskOutcome {
  int64_t length = 0;
  double depth = 0;
  bool correct = false;
  data::LongTaskKind kind = data::LongTaskKind::kMultiKey;
  int64_t tokens_right = 0, answer_tokens = 0;  // answer_tokens_right of answer_length
};

// Outcomes binned by length (rows, ascending) and by depth (depth_bins equal bins of [0, 1]).
struct AccuracyGrid {
  std::vector<int64_t> lengths;
  int depth_bins = 0;
  std::vector<std::vector<int64_t>> tasks, correct;  // [row][bin]

  double accuracy(size_t row, int bin) const;  // NaN for a cell without tasks
  std::string bin_label(int bin) const;        // "0-0.2"
};
AccuracyGrid accuracy_grid(std::span<const LongTaskOutcome> outcomes, int depth_bins);

// One row per length: correct/tasks in each depth bin, then the length's total; a last row of
// each bin's total over lengths.
std::string accuracy_table(const AccuracyGrid& grid);

// One row per length: the share of answer tokens right for each task kind and for all, in percent
// with right/total; a last row over lengths.
std::string token_accuracy_table(std::span<const LongTaskOutcome> outcomes);

// Length (rows) by depth (columns), colour and number = accuracy in percent, 0-100 fixed.
Heatmap accuracy_heatmap(const AccuracyGrid& grid, const std::string& title);

}  // namespace k3::train
