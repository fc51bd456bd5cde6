#include "k3/data/longctx/pieces.h"

#include <algorithm>
#include <set>

#include "k3/base/format.h"

namespace k3::data {
namespace {

constexpr int64_t kQueriedKeys = 4;  // multi-key retrieval asks for this many values
constexpr int64_t kChainLinks = 4;   // variable tracking: a number, then three copies
constexpr const char* kFruits[] = {"apples", "pears", "plums", "figs", "lemons", "limes"};

double uniform(RandomDraws& draws) { return draws.next_u32() * 0x1p-32; }

// Depths of the N pieces the answer needs: DEPTH, then N - 1 sorted uniform ones after it.
std::vector<double> needed_depths(int64_t n, double depth, RandomDraws& draws) {
  std::vector<double> d{depth};
  for (int64_t i = 1; i < n; ++i) d.push_back(depth + (1 - depth) * uniform(draws));
  std::sort(d.begin() + 1, d.end());
  return d;
}

// Names of LETTERS random letters (lowercase or uppercase), never one handed out before.
class Names {
 public:
  Names(RandomDraws& draws, char first_letter) : draws_(draws), first_(first_letter) {}
  std::string next(int letters) {
    for (;;) {
      std::string s;
      for (int i = 0; i < letters; ++i) s.push_back(static_cast<char>(first_ + draws_.below(26)));
      if (used_.insert(s).second) return s;
    }
  }

 private:
  RandomDraws& draws_;
  char first_;
  std::set<std::string> used_;
};

// Distinct numbers in [lo, lo + span).
class Numbers {
 public:
  Numbers(RandomDraws& draws, int64_t lo, int64_t span) : draws_(draws), lo_(lo), span_(span) {}
  int64_t next() {
    for (;;) {
      const int64_t v = lo_ + static_cast<int64_t>(draws_.below(static_cast<uint64_t>(span_)));
      if (used_.insert(v).second) return v;
    }
  }

 private:
  RandomDraws& draws_;
  int64_t lo_, span_;
  std::set<int64_t> used_;
};

TaskText multi_key(int64_t n, double depth, RandomDraws& draws) {
  Names keys(draws, 'a');
  Numbers values(draws, 100000, 900000);
  TaskText t;
  const std::vector<double> needed = needed_depths(kQueriedKeys, depth, draws);
  std::vector<std::pair<std::string, int64_t>> queried;
  for (int64_t i = 0; i < n; ++i) {
    const std::string key = keys.next(4) + "-" + keys.next(4);
    const int64_t value = values.next();
    const bool is_needed = i < kQueriedKeys;
    if (is_needed) queried.emplace_back(key, value);
    t.pieces.push_back(
        {strprintf("\nThe value of key %s is %lld.\n", key.c_str(), static_cast<long long>(value)),
         is_needed ? needed[static_cast<size_t>(i)] : uniform(draws), is_needed});
  }
  // The question names the keys in a random order, not in the order they appear.
  for (size_t i = queried.size(); i > 1; --i) std::swap(queried[i - 1], queried[draws.below(i)]);
  t.question = "\nQuestion: What are the values of the keys ";
  for (size_t i = 0; i < queried.size(); ++i) {
    t.question += (i == 0 ? "" : i + 1 == queried.size() ? " and " : ", ") + queried[i].first;
    t.answer += (i == 0 ? " " : ", ") + std::to_string(queried[i].second);
  }
  t.question += "?\nAnswer:";
  return t;
}

TaskText variable_tracking(int64_t n, double depth, RandomDraws& draws) {
  Names names(draws, 'A');
  Numbers numbers(draws, 10000, 90000);
  TaskText t;
  std::string asked;
  int64_t asked_value = 0;
  // Chains of up to kChainLinks assignments, each link after the one it copies; the first chain
  // is the one asked about, the others are distractors.
  for (int64_t first = 0; first < n; first += kChainLinks) {
    const int64_t links = std::min(kChainLinks, n - first);
    const bool is_needed = first == 0;
    const std::vector<double> d = needed_depths(links, is_needed ? depth : uniform(draws), draws);
    const int64_t value = numbers.next();
    std::string previous = std::to_string(value);
    for (int64_t k = 0; k < links; ++k) {
      const std::string name = names.next(5);
      t.pieces.push_back(
          {"\nVAR " + name + " = " + previous + ".\n", d[static_cast<size_t>(k)], is_needed});
      previous = name;
    }
    if (is_needed) asked = previous, asked_value = value;
  }
  t.question = "\nQuestion: Which number does the variable " + asked + " hold?\nAnswer:";
  t.answer = strprintf(" %lld", static_cast<long long>(asked_value));
  return t;
}

TaskText aggregation(int64_t n, double depth, RandomDraws& draws) {
  Names crates(draws, 'A');
  const int64_t fruits = std::size(kFruits);
  const int64_t counted_fruit = static_cast<int64_t>(draws.below(fruits));
  const int64_t counted = n / 2;
  const std::vector<double> needed = needed_depths(counted, depth, draws);
  TaskText t;
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool is_needed = i < counted;
    // A distractor holds any other fruit.
    const int64_t fruit =
        is_needed ? counted_fruit
                  : (counted_fruit + 1 + static_cast<int64_t>(draws.below(fruits - 1))) % fruits;
    const int64_t count = 1 + static_cast<int64_t>(draws.below(9));
    if (is_needed) total += count;
    t.pieces.push_back({strprintf("\nCrate %s holds %lld %s.\n", crates.next(4).c_str(),
                                  static_cast<long long>(count), kFruits[fruit]),
                        is_needed ? needed[static_cast<size_t>(i)] : uniform(draws), is_needed});
  }
  t.question = std::string("\nQuestion: How many ") + kFruits[counted_fruit] +
               " do all the crates hold together?\nAnswer:";
  t.answer = strprintf(" %lld", static_cast<long long>(total));
  return t;
}

}  // namespace

int64_t pieces_for_length(int64_t length) { return std::clamp<int64_t>(length / 128, 8, 64); }

TaskText make_task_text(LongTaskKind kind, int64_t num_pieces, double depth, RandomDraws& draws) {
  switch (kind) {
    case LongTaskKind::kMultiKey:
      return multi_key(num_pieces, depth, draws);
    case LongTaskKind::kVariableTracking:
      return variable_tracking(num_pieces, depth, draws);
    case LongTaskKind::kAggregation:
      return aggregation(num_pieces, depth, draws);
  }
  return {};
}

}  // namespace k3::data
