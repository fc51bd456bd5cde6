#include "k3/base/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

namespace k3 {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
// Seconds by path: the bucket's name after those of the buckets open around it.
std::map<std::vector<std::string>, double>& buckets() {
  static std::map<std::vector<std::string>, double> b;
  return b;
}
thread_local std::vector<std::string> t_open;  // this thread's open buckets, outermost first

void sort_tree(ProfileNode& n) {
  std::sort(n.children.begin(), n.children.end(),
            [](const ProfileNode& a, const ProfileNode& b) { return a.seconds > b.seconds; });
  for (ProfileNode& c : n.children) sort_tree(c);
}

void format_node(const ProfileNode& n, int depth, double whole, double per, std::string& out) {
  const auto line = [&](const std::string& name, double seconds) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %*s%-*s %9.3f s %6.1f%%\n", 2 * depth, "",
                  std::max(1, 38 - 2 * depth), name.c_str(), seconds / per, 100 * seconds / whole);
    out += buf;
  };
  line(n.name, n.seconds);
  for (const ProfileNode& c : n.children) format_node(c, depth + 1, whole, per, out);
  if (!n.children.empty()) {
    ++depth;
    line("other", std::max(0.0, n.own_seconds()));
  }
}

}  // namespace

double ProfileNode::own_seconds() const {
  double inside = 0;
  for (const ProfileNode& c : children) inside += c.seconds;
  return seconds - inside;
}

void Profile::enable(bool on) { g_enabled = on; }
bool Profile::enabled() { return g_enabled; }

void Profile::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  buckets().clear();
}

ProfileNode Profile::tree() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ProfileNode root;
  // Paths in map order put each parent before its children.
  for (const auto& [path, seconds] : buckets()) {
    ProfileNode* node = &root;
    for (const std::string& name : path) {
      auto it = std::find_if(node->children.begin(), node->children.end(),
                             [&](const ProfileNode& c) { return c.name == name; });
      if (it == node->children.end()) {
        node->children.push_back({name, 0, {}});
        it = node->children.end() - 1;
      }
      node = &*it;
    }
    node->seconds += seconds;
  }
  for (const ProfileNode& c : root.children) root.seconds += c.seconds;
  sort_tree(root);
  return root;
}

std::string format_profile(const ProfileNode& root, double whole, double per) {
  std::string out;
  for (const ProfileNode& c : root.children) format_node(c, 0, whole, per, out);
  return out;
}

void ProfileScope::open() { t_open.emplace_back(bucket_); }

void ProfileScope::close() {
  const double seconds = timer_.seconds();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    buckets()[t_open] += seconds;
  }
  t_open.pop_back();
  bucket_ = nullptr;
}

}  // namespace k3
