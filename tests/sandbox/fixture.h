// Shared by the sandbox tests: a fresh image store in a temporary directory, the namespaces
// backend, and checks that nothing of a sandbox outlives it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "k3/sandbox/sandbox.h"

namespace k3::sandbox::testing {

// The parent of process PID, or 0.
inline int parent_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  char state = 0;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// The agents (by their command line) of this process's sandboxes: bubblewrap's two processes lie
// between them and this one. Other processes' sandboxes (tests run in parallel) are not counted.
inline int count_agent_processes() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmd;
    std::getline(in, cmd, '\0');
    if (cmd != "/.k3lab-agent") continue;
    int p = std::stoi(name);
    for (int depth = 0; depth < 4 && p > 1; ++depth) {
      p = parent_of(p);
      if (p == getpid()) {
        ++n;
        break;
      }
    }
  }
  return n;
}

// Lines of /proc/self/mountinfo that name TEXT.
inline int count_mounts_naming(const std::string& text) {
  std::ifstream in("/proc/self/mountinfo");
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(text) != std::string::npos;
  return n;
}

// cgroup directories named NAME anywhere under /sys/fs/cgroup (depth-limited).
inline int count_cgroups_named(const std::string& name) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           "/sys/fs/cgroup", std::filesystem::directory_options::skip_permission_denied, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() > 4) it.disable_recursion_pending();
    if (it->is_directory(ec) && it->path().filename() == name) ++n;
  }
  return n;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("K3LAB_SANDBOX_AGENT", K3_SANDBOX_AGENT, 0);  // one given in the environment wins
    char tmpl[] = "/tmp/k3sbx-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    store_ = std::make_unique<ImageStore>(dir_ + "/store");
    backend_ = make_backend(BackendKind::kNamespaces, *store_);
    if (const std::string why = backend_->unavailable_reason(); !why.empty())
      GTEST_SKIP() << "namespaces backend unavailable: " << why;
    agents_before_ = count_agent_processes();
  }

  void TearDown() override {
    backend_.reset();
    if (!dir_.empty() && !HasFatalFailure() && !IsSkipped()) {
      EXPECT_EQ(count_agent_processes(), agents_before_) << "a sandbox's agent outlived the test";
      EXPECT_EQ(count_mounts_naming(dir_), 0) << "a mount of the store is left on the host";
      // Every sandbox's run directory is gone.
      EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/run"));
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<Sandbox> make(const std::string& image = "host", Limits limits = {}) {
    return backend_->create(store_->resolve(image), limits);
  }

  // An image of busybox alone (static: nothing else of the host), or "" without busybox.
  std::string busybox_image() {
    const std::string busybox = "/bin/busybox";
    if (access(busybox.c_str(), X_OK) != 0) return "";
    const std::string src = dir_ + "/busybox-root";
    std::filesystem::create_directories(src + "/bin");
    std::filesystem::copy_file(busybox, src + "/bin/busybox",
                               std::filesystem::copy_options::overwrite_existing);
    for (const char* tool : {"sh", "cat", "echo", "ls", "sleep", "dd", "head", "stat", "id", "ps",
                             "grep", "rm", "mkdir", "find", "kill", "wc", "uname", "yes", "true"}) {
      std::error_code ec;
      std::filesystem::create_symlink("busybox", src + "/bin/" + tool, ec);
    }
    return store_->import_directory(src, "busybox");
  }

  static ExecResult sh(Sandbox& s, const std::string& script, const std::string& stdin_data = "") {
    ExecRequest q;
    q.argv = {"/bin/sh", "-c", script};
    q.stdin_data = stdin_data;
    return s.exec(q);
  }

  std::string dir_;
  std::unique_ptr<ImageStore> store_;
  std::unique_ptr<Backend> backend_;
  int agents_before_ = 0;
};

}  // namespace k3::sandbox::testing
