// The text of one long-context task before it is placed: its pieces, each with the depth where it
// goes, and the question with its answer. The wording here is what oracle.h parses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/data/longctx/task.h"
#include "k3/data/random_draws.h"

namespace k3::data {

struct TaskPiece {
  std::string text;     // one line, "\n" before and after
  double depth = 0;     // in [0, 1]
  bool needed = false;  // the answer depends on it
};

struct TaskText {
  std::vector<TaskPiece> pieces;  // pieces that must stay in order (a chain) have rising depths
  std::string question;           // "\nQuestion: ...\nAnswer:"
  std::string answer;             // " ...": what follows the question
};

// How many pieces a task of LENGTH tokens scatters: one per 128 tokens, at least 8, at most 64.
int64_t pieces_for_length(int64_t length);

// The first piece the answer needs goes at DEPTH, the others it needs at uniform depths after it
// (in [DEPTH, 1]), and the distractors at uniform depths in [0, 1].
TaskText make_task_text(LongTaskKind kind, int64_t num_pieces, double depth, RandomDraws& draws);

}  // namespace k3::data
