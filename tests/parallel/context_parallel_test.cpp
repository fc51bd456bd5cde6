// Context parallelism of the whole model (k3-nano: KDA by KCP, gated MLA by ring attention, the
// rest on each rank's tokens), alone and with data, tensor and expert parallelism, against the
// single-process run of the same global batch: cp2 under mpirun -np 2; cp4, cp2 × dp2,
// cp2 × tp2 and cp2 × ep2 under -np 4. Sequences of 32 tokens, cut into 2·cp zig-zag chunks;
// some targets ignored (unevenly, so the ranks count different numbers of tokens). With packed
// documents every layout takes one row a replica, each row packing documents that start inside
// chunks, on chunk boundaries and one token before one, and cross ranks.
//
// Tolerances as in the tensor-parallel tests (fp32, other summation orders): loss 1e-6 relative,
// gradient norm 1e-5, every gradient 1e-4 of its tensor's largest entry; three steps from the
// one-process state, losses 1e-6 and updates 3e-2 of their size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/tp_util.h"
#include "parallel/trainee.h"

namespace k3::parallel::context_parallel_test {
namespace {

using testing::GlobalBatch;
using testing::kRows;
using testing::Setup;
using testing::Trainee;

constexpr int64_t kSeq = 32;

struct Layout {
  int cp, dp, tp;
  Setup setup;
  bool documents = false;
  int ep = 1;  // expert parallelism beside (its ranks carved out of the data ranks)
};

// Document starts within each 32-token row: chunks are 8 tokens at cp2, 4 at cp4.
const std::vector<int64_t> kDocs = {0, 5, 8, 15, 23};

std::string name(const ::testing::TestParamInfo<Layout>& p) {
  const Layout& l = p.param;
  std::string s = "cp" + std::to_string(l.cp);
  if (l.dp > 1) s += "_dp" + std::to_string(l.dp);
  if (l.tp > 1) s += "_tp" + std::to_string(l.tp);
  if (l.ep > 1) s += "_ep" + std::to_string(l.ep);
  return s + "_" + l.setup.optimizer + "_zero" + std::to_string(l.setup.zero) +
         (l.documents ? "_documents" : "");
}

class ContextParallelMatchesOneProcess : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    const Layout& l = GetParam();
    if (world.size() != l.cp * l.dp * l.tp * l.ep)
      GTEST_SKIP() << "runs on " << l.cp * l.dp * l.tp * l.ep << " ranks";
    grid = std::make_unique<dist::ProcessGrid>(
        dist::ParallelDims{.tp = l.tp, .cp = l.cp, .ep = l.ep, .dp = l.dp}, world);
    ref = std::make_unique<Trainee>(dist::single_process(), l.setup);
    run = std::make_unique<Trainee>(*grid, l.setup);
  }
  std::string what() const { return name(::testing::TestParamInfo<Layout>(GetParam(), 0)); }
  int64_t rows() const { return GetParam().documents ? GetParam().dp * GetParam().ep : kRows; }
  std::vector<int64_t> docs() const {
    return GetParam().documents ? kDocs : std::vector<int64_t>{};
  }

  dist::Comm world = dist::Comm::world();
  std::unique_ptr<dist::ProcessGrid> grid;
  std::unique_ptr<Trainee> ref, run;
};

TEST_P(ContextParallelMatchesOneProcess, FirstStepLossAndEveryGradient) {
  const auto [loss, worst] = testing::expect_step_matches(
      *ref, *run, GlobalBatch(ref->model.config(), 0, kSeq, rows(), docs()), GetParam().setup.zero);
  if (world.rank() == 0)
    std::printf("%s: loss %.2g relative, max gradient error %.3g\n", what().c_str(), loss, worst);
}

TEST_P(ContextParallelMatchesOneProcess, ThreeStepsEachFromTheOneProcessState) {
  testing::expect_steps_from(*ref, *run, 3, kSeq, what(), rows(), docs());
}

std::vector<Layout> layouts() {
  const Setup adamw0{0, "adamw"}, muon1{1, "muon"};
  std::vector<Layout> out = {
      {2, 1, 1, adamw0}, {2, 1, 1, muon1}, {4, 1, 1, muon1}, {2, 2, 1, adamw0}, {2, 1, 2, muon1}};
  for (Layout l : {Layout{2, 1, 1, adamw0}, Layout{4, 1, 1, muon1}, Layout{2, 2, 1, muon1},
                   Layout{2, 1, 2, adamw0}}) {
    l.documents = true;
    out.push_back(l);
  }
  out.push_back({2, 1, 1, adamw0, false, 2});  // cp2 × ep2, the experts' rows by all-to-all
  return out;
}

INSTANTIATE_TEST_SUITE_P(ContextParallel, ContextParallelMatchesOneProcess,
                         ::testing::ValuesIn(layouts()), name);

}  // namespace
}  // namespace k3::parallel::context_parallel_test
