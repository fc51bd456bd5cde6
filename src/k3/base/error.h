// Errors that say where they come from: which file, which field, which rank.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace k3 {

// Where an error happened. Empty parts are not printed.
struct ErrorContext {
  std::string file;   // a config, data file or checkpoint path
  std::string field;  // a config field, tensor name or argument
  int rank = -1;      // the process rank, when distributed
};

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, ErrorContext ctx = {});
  const std::string& message() const { return message_; }
  const ErrorContext& context() const { return ctx_; }

  // A copy of this error with context parts filled in where they were empty.
  Error with_file(const std::string& file) const;
  Error with_field(const std::string& field) const;
  Error with_rank(int rank) const;

 private:
  static std::string format(const std::string& message, const ErrorContext& ctx);
  std::string message_;
  ErrorContext ctx_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace k3

// K3_CHECK(cond, "message parts", ...) throws k3::Error when cond is false.
#define K3_CHECK(cond, ...)                                        \
  do {                                                             \
    if (!(cond)) throw ::k3::Error(::k3::detail::concat(__VA_ARGS__)); \
  } while (0)

// K3_CHECK_CTX(cond, ctx, ...) is K3_CHECK with an ErrorContext.
#define K3_CHECK_CTX(cond, ctx, ...)                                    \
  do {                                                                  \
    if (!(cond)) throw ::k3::Error(::k3::detail::concat(__VA_ARGS__), ctx); \
  } while (0)
