#include "k3/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace k3 {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("K3_LOG");
  if (!env) return LogLevel::Info;
  try {
    return parse_log_level(env);
  } catch (const Error&) {
    return LogLevel::Info;
  }
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { level_ref() = level; }
LogLevel log_level() { return level_ref(); }

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warn") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  if (name == "off") return LogLevel::Off;
  throw Error("unknown log level '" + name + "' (expected debug, info, warn, error or off)");
}

void log_line(LogLevel level, const std::string& text) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "[k3lab %s] %s\n", names[static_cast<int>(level)], text.c_str());
}

}  // namespace k3
