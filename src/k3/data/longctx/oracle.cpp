#include "k3/data/longctx/oracle.h"

#include <cctype>
#include <map>
#include <vector>

namespace k3::data {
namespace {

// " " + S (written so because GCC 12 wrongly warns about overlapping copies in operator+).
std::string spaced(std::string_view s) {
  std::string out(1, ' ');
  return out.append(s);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The middle of LINE when it is PREFIX middle SUFFIX exactly.
std::optional<std::string_view> between(std::string_view line, std::string_view prefix,
                                        std::string_view suffix) {
  if (line.size() < prefix.size() + suffix.size() || !line.starts_with(prefix) ||
      !line.ends_with(suffix))
    return std::nullopt;
  return line.substr(prefix.size(), line.size() - prefix.size() - suffix.size());
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// "A and B", "A, B and C": the names.
std::vector<std::string_view> name_list(std::string_view s) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t comma = s.find(", "), and_ = s.find(" and ");
    const size_t cut = std::min(comma, and_);
    if (cut == std::string_view::npos) {
      out.push_back(s);
      return out;
    }
    out.push_back(s.substr(0, cut));
    s.remove_prefix(cut + (cut == comma ? 2 : 5));
  }
}

std::optional<std::string> multi_key(const std::vector<std::string_view>& context,
                                     std::string_view keys) {
  std::map<std::string_view, std::string_view> value_of;
  for (std::string_view line : context)
    if (auto body = between(line, "The value of key ", ".")) {
      const size_t is = body->find(" is ");
      if (is != std::string_view::npos && all_digits(body->substr(is + 4)))
        value_of[body->substr(0, is)] = body->substr(is + 4);
    }
  std::string answer;
  for (std::string_view key : name_list(keys)) {
    auto it = value_of.find(key);
    if (it == value_of.end()) return std::nullopt;
    answer += (answer.empty() ? " " : ", ") + std::string(it->second);
  }
  return answer;
}

std::optional<std::string> variable(const std::vector<std::string_view>& context,
                                    std::string_view name) {
  std::map<std::string_view, std::string_view> assigned;
  for (std::string_view line : context)
    if (auto body = between(line, "VAR ", ".")) {
      const size_t eq = body->find(" = ");
      if (eq != std::string_view::npos) assigned[body->substr(0, eq)] = body->substr(eq + 3);
    }
  for (size_t hops = 0; hops <= assigned.size(); ++hops) {  // bounded: a cycle answers nothing
    auto it = assigned.find(name);
    if (it == assigned.end()) return std::nullopt;
    if (all_digits(it->second)) return spaced(it->second);
    name = it->second;
  }
  return std::nullopt;
}

std::optional<std::string> aggregate(const std::vector<std::string_view>& context,
                                     std::string_view fruit) {
  const std::string suffix = spaced(fruit) + ".";
  long long total = 0;
  int found = 0;
  for (std::string_view line : context)
    if (auto body = between(line, "Crate ", suffix)) {
      const size_t holds = body->find(" holds ");
      if (holds != std::string_view::npos && all_digits(body->substr(holds + 7))) {
        total += std::stoll(std::string(body->substr(holds + 7)));
        ++found;
      }
    }
  if (found == 0) return std::nullopt;
  return spaced(std::to_string(total));
}

}  // namespace

std::optional<std::string> solve_long_task(std::string_view text) {
  const size_t q = text.rfind("\nQuestion: ");
  if (q == std::string_view::npos) return std::nullopt;
  const std::vector<std::string_view> context = lines_of(text.substr(0, q));
  const std::string_view question = text.substr(q + 1);
  if (auto keys = between(question, "Question: What are the values of the keys ", "?\nAnswer:"))
    return multi_key(context, *keys);
  if (auto name = between(question, "Question: Which number does the variable ", " hold?\nAnswer:"))
    return variable(context, *name);
  if (auto fruit =
          between(question, "Question: How many ", " do all the crates hold together?\nAnswer:"))
    return aggregate(context, *fruit);
  return std::nullopt;
}

}  // namespace k3::data
