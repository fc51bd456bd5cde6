#include "k3/base/profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace k3 {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::map<std::string, double>& buckets() {
  static std::map<std::string, double> b;
  return b;
}

}  // namespace

void Profile::enable(bool on) { g_enabled = on; }
bool Profile::enabled() { return g_enabled; }

void Profile::add(const std::string& bucket, double seconds) {
  std::lock_guard<std::mutex> lock(g_mutex);
  buckets()[bucket] += seconds;
}

void Profile::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  buckets().clear();
}

std::vector<std::pair<std::string, double>> Profile::totals() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<std::string, double>> out(buckets().begin(), buckets().end());
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace k3
