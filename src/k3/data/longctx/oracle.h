// A solver that reads a task document's text the way pieces.cpp writes it: the last
// "\nQuestion: " line and the fact lines before it. With the whole context it answers every task
// exactly; with part of it, it lacks a piece the answer needs and answers nothing (or a wrong
// sum), which is what makes a task a test of the whole context.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace k3::data {

// The answer, as the answer span reads (with its leading space), to the question at the end of
// TEXT (which ends with "Answer:"); nullopt when a piece it needs is missing or the question is
// not one of the three kinds.
std::optional<std::string> solve_long_task(std::string_view text);

}  // namespace k3::data
