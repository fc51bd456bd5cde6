#include "k3/base/log.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace k3 {

bool warnings_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("K3_LOG");
    return !env || std::string_view(env) != "off";
  }();
  return enabled;
}

void log_line(const std::string& text) { std::fprintf(stderr, "[k3lab warn] %s\n", text.c_str()); }

}  // namespace k3
