// A layout to plan: how many ranks each parallelism takes, the ZeRO stage, and the options that
// change what the ranks hold and move (docs/planner.md).
#pragma once

#include <cstdint>
#include <string>

namespace k3::planner {

struct Layout {
  int64_t dp = 1, tp = 1, pp = 1, vp = 1, ep = 1, cp = 1;
  int zero = 1;                    // 0: replicated optimizer; 1: states sharded; 2: gradients too
  bool sequence_parallel = false;  // the residual stream's tokens split over tp
  bool moonep = false;             // MoonEP's balanced dispatch instead of the plain all-to-all
  int64_t moonep_slots = 2;
  int64_t gpus() const { return dp * tp * pp * ep * cp; }
  std::string str() const;  // "dp=4,tp=8,pp=8,vp=2,ep=8,cp=1"
};

// The most GPUs a layout takes, and so the most any of its sizes may be: more than any cluster
// has, and small enough that no product of sizes overflows or leaves a rank index's range.
constexpr int64_t kMaxGpus = int64_t{1} << 20;

// "dp=4,tp=8,pp=8" (sp=1 turns sequence parallelism on; unnamed sizes are 1, each size named at
// most once). Throws one line naming the part that is wrong.
Layout parse_layout(const std::string& text);
// Throws one line unless every size lies in [1, kMaxGpus] and so do the GPUs they take.
void check_layout_sizes(const Layout& l);

}  // namespace k3::planner
