// A PyTorch script in a child process that answers requests one line at a time. The benchmarks
// against PyTorch use it to alternate the two sides repetition by repetition (k3lab, PyTorch,
// k3lab, ...), so that the shared host's drifting load falls on both alike.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace k3::bench {

class TorchChild {
 public:
  // Runs `command` under /bin/sh and reads the first line it prints once ready (greeting()).
  explicit TorchChild(const std::string& command) {
    std::signal(SIGPIPE, SIG_IGN);  // a child that died is reported, not fatal
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    greeting_ = read_line();
  }
  ~TorchChild() {
    std::fclose(in_);  // end of input: the child exits
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }
  TorchChild(const TorchChild&) = delete;
  TorchChild& operator=(const TorchChild&) = delete;

  const std::string& greeting() const { return greeting_; }

  // Sends one request line, returns the answer line.
  std::string request(const std::string& line) {
    std::fputs((line + "\n").c_str(), in_);
    std::fflush(in_);
    return read_line();
  }

 private:
  std::string read_line() {
    char line[4096];
    if (!std::fgets(line, sizeof line, out_)) throw std::runtime_error("the PyTorch side exited");
    return std::string(line, strcspn(line, "\n"));
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::string greeting_;
};

// A pause between the two sides' repetitions: OpenBLAS's idle threads spin for up to ~0.1 s after
// the last call, and must not eat into the k3lab repetition that follows.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// The seconds of each side's timed repetitions, and PyTorch's over k3lab's within each pair.
struct Alternation {
  std::vector<double> ours, torch, ratios;
};

// `warmup` + `reps` pairs: one repetition of k3lab's side (ours(), returning its seconds), then
// one of PyTorch's (torch()), settling after each; the warm-up pairs are not kept.
template <typename Ours, typename Torch>
Alternation alternate(int warmup, int reps, Ours&& ours, Torch&& torch) {
  Alternation r;
  for (int rep = 0; rep < warmup + reps; ++rep) {
    const double a = ours();
    settle();
    const double b = torch();
    settle();
    if (rep < warmup) continue;
    r.ours.push_back(a);
    r.torch.push_back(b);
    r.ratios.push_back(b / a);
  }
  return r;
}

}  // namespace k3::bench
