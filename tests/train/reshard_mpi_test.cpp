// Checkpoints reshard (under mpirun -np 4; skipped otherwise). A k3-nano run trained two steps
// under tp2 (Muon, ZeRO 1) is saved in global coordinates; the checkpoint then loads under tp4,
// dp2 × tp2, pp2 × tp2, pp4 and one process, and under each:
//   - the logits equal the saved run's (1e-5 of the largest logit: fp32, the layouts add partial
//     sums in other orders), where the whole model is on one rank (not under pp);
//   - saving it again writes the same model and optimizer files, byte for byte (weights and
//     state move between layouts by copies, never by arithmetic);
//   - one more training step gives the saved run's next loss (1e-6 relative).
// Both halves of the job run the tp2 run (each over its own two ranks); world rank 0 writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tp_util.h"
#include "k3/base/fs.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"
#include "parallel/trainee.h"

namespace k3::train {
namespace {

using parallel::testing::GlobalBatch;
using parallel::testing::kRows;

const model::ModelConfig& config() {
  static const model::ModelConfig c = parallel::testing::nano();
  return c;
}

// A session on `grid` with its data-parallel step (Muon, ZeRO 1).
struct Trained {
  std::unique_ptr<Session> s;
  parallel::ParallelStep dp;
  explicit Trained(const dist::ProcessGrid& grid)
      : s(open_session(RunConfig{}, config(), grid)),
        dp(*s->model, grid, parallel::testing::Trainee::plan(*s->model, "muon"), {},
           {.zero = 1, .bucket_floats = 20000, .overlap = true}) {}
  double step(int at) {
    const GlobalBatch batch(config(), at);
    const parallel::StepTotals t =
        dp.forward_backward(s->arena, s->acts, batch.share(dp.first_row(kRows), dp.rows(kRows)));
    dp.apply(2e-3f, 1.0f);
    return t.loss;
  }
  std::vector<float> logits() {
    const GlobalBatch batch(config(), 9);
    std::vector<float> out(
        static_cast<size_t>(kRows * parallel::testing::kT * config().vocab_size));
    s->model->forward_logits(s->arena, batch.tokens[0].data(), kRows, parallel::testing::kT,
                             out.data());
    return out;
  }
  std::string save(const std::string& run_dir, bool writer) {
    return save_checkpoint(
        run_dir, 2,
        make_checkpoint(*s, optimizer_sources(dp.optimizer(), *s->model), nlohmann::json::object()),
        0, writer);
  }
};

TEST(ReshardMpi, SavedUnderTp2LoadsAndResumesUnderEveryLayout) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() != 4) GTEST_SKIP() << "runs under mpirun -np 4";
  // One folder for the job: world rank 0's process id names it.
  int32_t pid = ::getpid();
  world.broadcast(&pid, 1, 0);
  const std::string root =
      (std::filesystem::temp_directory_path() / ("k3_reshard_" + std::to_string(pid))).string();
  const bool writer = world.rank() == 0;

  const dist::Comm half = world.split("half", world.rank() / 2, world.rank() % 2);
  const dist::ProcessGrid tp2({.tp = 2}, half);
  std::vector<float> want_logits;
  double want_next = 0;
  {
    Trained saved(tp2);
    saved.s->model->initialize(7);
    k3::testing::spread_routers(*saved.s->model);
    saved.step(0);
    saved.step(1);
    want_logits = saved.logits();
    saved.save(root + "/tp2", writer);
    want_next = saved.step(2);
  }
  world.barrier();
  const std::string step_dir = root + "/tp2/checkpoints/" + checkpoint_dir_name(2);

  struct Layout {
    const char* name;
    dist::ParallelDims dims;
    dist::Comm comm;
  };
  for (const Layout& l :
       {Layout{"tp4", {.tp = 4}, world}, Layout{"dp2_tp2", {.tp = 2, .dp = 2}, world},
        Layout{"pp2_tp2", {.tp = 2, .pp = 2}, world}, Layout{"pp4", {.pp = 4}, world},
        Layout{"one_process", {}, dist::Comm()}}) {
    const dist::ProcessGrid grid(l.dims, l.comm);
    Trained loaded(grid);
    {
      const Checkpoint ck = load_checkpoint(step_dir);
      restore_weights(*loaded.s->model, ck, step_dir);
      loaded.dp.optimizer().restore_state(optimizer_state_reader(ck, step_dir));
      loaded.dp.optimizer().set_steps_taken(2);
    }
    double e = 0;  // the logits of the whole model, where one rank holds it (not under pp)
    if (l.dims.pp == 1) {
      const std::vector<float> logits = loaded.logits();
      e = k3::testing::max_rel_error(logits.data(), want_logits.data(),
                                     static_cast<int64_t>(logits.size()));
      EXPECT_LT(e, 1e-5) << l.name << ": logits";
    }
    const std::string again = root + "/" + l.name;
    loaded.save(again, writer);
    world.barrier();
    if (writer) {
      for (const char* file : {"model.safetensors", "optimizer.safetensors"})
        EXPECT_EQ(read_file(step_dir + "/" + file),
                  read_file(again + "/checkpoints/" + checkpoint_dir_name(2) + "/" + file))
            << l.name << ": " << file << " differs";
    }
    const double next = loaded.step(2);
    EXPECT_NEAR(next, want_next, 1e-6 * want_next) << l.name << ": the next step's loss";
    if (world.rank() == 0)
      std::printf(
          "saved under tp2, loaded under %s: logits within %.2g, next loss %.2g "
          "relative\n",
          l.name, e, std::abs(next - want_next) / want_next);
  }
  world.barrier();
  if (writer) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace k3::train
