// Levelled logging to stderr. The level comes from K3_LOG (debug, info, warn, error) or set_log_level.
#pragma once

#include <string>

#include "k3/base/error.h"

namespace k3 {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
LogLevel parse_log_level(const std::string& name);  // throws on an unknown name
void log_line(LogLevel level, const std::string& text);

template <typename... Args>
void log_debug(Args&&... a) { if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, detail::concat(a...)); }
template <typename... Args>
void log_info(Args&&... a) { if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, detail::concat(a...)); }
template <typename... Args>
void log_warn(Args&&... a) { if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, detail::concat(a...)); }
template <typename... Args>
void log_error(Args&&... a) { if (log_level() <= LogLevel::Error) log_line(LogLevel::Error, detail::concat(a...)); }

}  // namespace k3
