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

namespace {
std::string& log_tag() {
  static std::string tag;
  return tag;
}
}  // namespace

void set_log_tag(const std::string& tag) { log_tag() = tag; }

void log_line(const std::string& text) {
  std::fprintf(stderr, "[k3lab warn] %s%s\n", log_tag().c_str(), text.c_str());
}

}  // namespace k3
