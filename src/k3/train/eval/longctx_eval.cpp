#include "k3/train/eval/longctx_eval.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/base/format.h"

namespace k3::train {

bool predicts_answer(const data::LongTask& task, std::span<const int32_t> predicted) {
  const auto answer = std::span(task.tokens)
                          .subspan(static_cast<size_t>(task.answer_offset),
                                   static_cast<size_t>(task.answer_length));
  return std::equal(answer.begin(), answer.end(), predicted.begin(), predicted.end());
}

int64_t answer_tokens_right(const data::LongTask& task, std::span<const int32_t> predicted) {
  int64_t right = 0;
  for (int64_t i = 0; i < std::min<int64_t>(task.answer_length, std::ssize(predicted)); ++i)
    right += predicted[static_cast<size_t>(i)] ==
             task.tokens[static_cast<size_t>(task.answer_offset + i)];
  return right;
}

std::vector<int32_t> greedy_answer_tokens(Session& s, const data::LongTask& task) {
  K3_CHECK(task.answer_offset > 0 && task.answer_length > 0 &&
               task.answer_offset + task.answer_length <= task.length(),
           "a long-context task's answer span must lie inside it after some context");
  model::Model& m = *s.model;
  model::ModelCache cache = m.make_cache(task.answer_offset + task.answer_length);
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  auto greedy = [&] {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  m.decode(s.arena, cache, task.tokens.data(), task.answer_offset, logits.data());
  std::vector<int32_t> predicted{greedy()};
  for (int64_t j = task.answer_offset; j + 1 < task.answer_offset + task.answer_length; ++j) {
    m.decode(s.arena, cache, &task.tokens[static_cast<size_t>(j)], 1, logits.data());
    predicted.push_back(greedy());
  }
  return predicted;
}

double AccuracyGrid::accuracy(size_t row, int bin) const {
  const int64_t n = tasks[row][static_cast<size_t>(bin)];
  return n == 0 ? NAN : static_cast<double>(correct[row][static_cast<size_t>(bin)]) / n;
}

std::string AccuracyGrid::bin_label(int bin) const {
  return strprintf("%g-%g", static_cast<double>(bin) / depth_bins,
                   static_cast<double>(bin + 1) / depth_bins);
}

AccuracyGrid accuracy_grid(std::span<const LongTaskOutcome> outcomes, int depth_bins) {
  K3_CHECK(depth_bins >= 1, "the accuracy grid needs at least one depth bin");
  AccuracyGrid g;
  g.depth_bins = depth_bins;
  for (const LongTaskOutcome& o : outcomes) g.lengths.push_back(o.length);
  std::sort(g.lengths.begin(), g.lengths.end());
  g.lengths.erase(std::unique(g.lengths.begin(), g.lengths.end()), g.lengths.end());
  g.tasks.assign(g.lengths.size(), std::vector<int64_t>(static_cast<size_t>(depth_bins), 0));
  g.correct = g.tasks;
  for (const LongTaskOutcome& o : outcomes) {
    const size_t row = static_cast<size_t>(
        std::lower_bound(g.lengths.begin(), g.lengths.end(), o.length) - g.lengths.begin());
    const size_t bin = static_cast<size_t>(
        std::clamp(static_cast<int>(std::floor(o.depth * depth_bins)), 0, depth_bins - 1));
    ++g.tasks[row][bin];
    g.correct[row][bin] += o.correct;
  }
  return g;
}

std::string accuracy_table(const AccuracyGrid& g) {
  int width = 3;
  for (int b = 0; b < g.depth_bins; ++b)
    width = std::max(width, static_cast<int>(("depth " + g.bin_label(b)).size()));
  std::string out = strprintf("%-8s", "length");
  for (int b = 0; b < g.depth_bins; ++b)
    out += strprintf(" %*s", width, ("depth " + g.bin_label(b)).c_str());
  out += strprintf(" %*s\n", width, "all");
  auto cell = [](int64_t correct, int64_t tasks) {
    return tasks == 0 ? std::string("-")
                      : strprintf("%lld/%lld", static_cast<long long>(correct),
                                  static_cast<long long>(tasks));
  };
  std::vector<int64_t> bin_tasks(static_cast<size_t>(g.depth_bins), 0), bin_correct = bin_tasks;
  int64_t all_tasks = 0, all_correct = 0;
  for (size_t r = 0; r < g.lengths.size(); ++r) {
    out += strprintf("%-8s", data::context_length_label(g.lengths[r]).c_str());
    int64_t n = 0, c = 0;
    for (size_t b = 0; b < bin_tasks.size(); ++b) {
      out += strprintf(" %*s", width, cell(g.correct[r][b], g.tasks[r][b]).c_str());
      n += g.tasks[r][b], c += g.correct[r][b];
      bin_tasks[b] += g.tasks[r][b], bin_correct[b] += g.correct[r][b];
    }
    out +=
        strprintf(" %*s %4.0f%%\n", width, cell(c, n).c_str(), 100.0 * c / std::max<int64_t>(n, 1));
    all_tasks += n, all_correct += c;
  }
  out += strprintf("%-8s", "all");
  for (size_t b = 0; b < bin_tasks.size(); ++b)
    out += strprintf(" %*s", width, cell(bin_correct[b], bin_tasks[b]).c_str());
  out += strprintf(" %*s %4.0f%%\n", width, cell(all_correct, all_tasks).c_str(),
                   100.0 * all_correct / std::max<int64_t>(all_tasks, 1));
  return out;
}

std::string token_accuracy_table(std::span<const LongTaskOutcome> outcomes) {
  std::vector<int64_t> lengths;
  for (const LongTaskOutcome& o : outcomes) lengths.push_back(o.length);
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  constexpr int kAll = data::kLongTaskKinds, kWidth = 24;
  std::string out = strprintf("%-8s", "length");
  for (int k = 0; k < kAll; ++k)
    out += strprintf(
        " %*s", kWidth,
        std::string(data::long_task_kind_name(static_cast<data::LongTaskKind>(k))).c_str());
  out += strprintf(" %*s\n", kWidth, "all");
  auto row = [&](const std::string& label, auto in_row) {
    std::vector<int64_t> right(kAll + 1, 0), total(kAll + 1, 0);
    for (const LongTaskOutcome& o : outcomes) {
      if (!in_row(o)) continue;
      for (size_t k : {static_cast<size_t>(o.kind), static_cast<size_t>(kAll)}) {
        right[k] += o.tokens_right;
        total[k] += o.answer_tokens;
      }
    }
    out += strprintf("%-8s", label.c_str());
    for (size_t k = 0; k <= kAll; ++k)
      out += strprintf(" %*s", kWidth,
                       total[k] == 0 ? "-"
                                     : strprintf("%.1f%% (%lld/%lld)", 100.0 * right[k] / total[k],
                                                 static_cast<long long>(right[k]),
                                                 static_cast<long long>(total[k]))
                                           .c_str());
    out += "\n";
  };
  for (int64_t len : lengths)
    row(data::context_length_label(len),
        [len](const LongTaskOutcome& o) { return o.length == len; });
  row("all", [](const LongTaskOutcome&) { return true; });
  return out;
}

Heatmap accuracy_heatmap(const AccuracyGrid& g, const std::string& title) {
  Heatmap h;
  h.title = title;
  h.x_label = "answer depth (0: start of the context)";
  h.y_label = "context length (tokens)";
  h.value_label = "accuracy (%)";
  h.scale_lo = 0;
  h.scale_hi = 100;
  h.cell_numbers = true;
  h.height = std::clamp(120 + 60 * static_cast<int>(g.lengths.size()), 240, 640);
  for (int b = 0; b < g.depth_bins; ++b) h.column_labels.push_back(g.bin_label(b));
  for (size_t r = 0; r < g.lengths.size(); ++r) {
    h.row_labels.push_back(data::context_length_label(g.lengths[r]));
    std::vector<double> row;
    for (int b = 0; b < g.depth_bins; ++b) row.push_back(std::round(100 * g.accuracy(r, b)));
    h.values.push_back(row);
  }
  return h;
}

}  // namespace k3::train
