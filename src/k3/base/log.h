// Warnings to stderr. K3_LOG=off silences them (K3_LOG=warn, the default, shows them).
#pragma once

#include <string>

#include "k3/base/error.h"

namespace k3 {

bool warnings_enabled();
void log_line(const std::string& text);  // one "[k3lab warn] TAG text" line
// A tag every later line carries, e.g. "[rank 3] " in a multi-process job (empty by default).
void set_log_tag(const std::string& tag);

template <typename... Args>
void log_warn(Args&&... a) {
  if (warnings_enabled()) log_line(detail::concat(a...));
}

}  // namespace k3
