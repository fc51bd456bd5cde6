#include "k3/base/error.h"

namespace k3 {

Error::Error(std::string message, ErrorContext ctx)
    : std::runtime_error(format(message, ctx)), message_(std::move(message)), ctx_(std::move(ctx)) {}

std::string Error::format(const std::string& message, const ErrorContext& ctx) {
  std::string where;
  auto add = [&](const std::string& part) { where += (where.empty() ? "" : ", ") + part; };
  if (!ctx.file.empty()) add("file " + ctx.file);
  if (!ctx.field.empty()) add("field " + ctx.field);
  if (ctx.rank >= 0) add("rank " + std::to_string(ctx.rank));
  return where.empty() ? message : where + ": " + message;
}

Error Error::with_file(const std::string& file) const {
  ErrorContext c = ctx_;
  if (c.file.empty()) c.file = file;
  return Error(message_, c);
}

Error Error::with_field(const std::string& field) const {
  ErrorContext c = ctx_;
  if (c.field.empty()) c.field = field;
  return Error(message_, c);
}

Error Error::with_rank(int rank) const {
  ErrorContext c = ctx_;
  if (c.rank < 0) c.rank = rank;
  return Error(message_, c);
}

}  // namespace k3
