#include "k3/train/config/curriculum.h"

#include <gtest/gtest.h>

#include <functional>

#include "k3/base/error.h"
#include "k3/train/config/run_config.h"

namespace k3::train::curriculum_test {
namespace {

// 8 sequences of 512 tokens a micro-batch, 100 steps; phases at 512, 1K and 4K tokens.
const std::string kHead = "[data]\nseq_len = 512\n[train]\nsteps = 100\nbatch_size = 8\n";
const std::string kRun = kHead + R"(

[[curriculum]]
share = 0.6
seq_len = 512

[[curriculum]]
share = 0.3
seq_len = 1024
data.documents = true
activation.policy = "recompute"

[[curriculum]]
share = 0.1
seq_len = 4096
activation = { policy = "offload", granularity = "layer" }
)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Curriculum, ParsesPhasesAndWritesThemBack) {
  const RunConfig c = parse_run_config(kRun, "run.toml");
  ASSERT_EQ(c.curriculum.size(), 3u);
  EXPECT_DOUBLE_EQ(c.curriculum[1].share, 0.3);
  EXPECT_EQ(c.curriculum[1].seq_len, 1024);
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(c.curriculum[0].settings, Settings{});
  // In key order, as TOML tables hold them.
  EXPECT_EQ(c.curriculum[1].settings,
            (Settings{{"activation.policy", "\"recompute\""}, {"data.documents", "true"}}));
  EXPECT_EQ(c.curriculum[2].settings, (Settings{{"activation.granularity", "\"layer\""},
                                                {"activation.policy", "\"offload\""}}));
  EXPECT_EQ(parse_run_config(to_toml(c)), c);
  RunConfig other = c;
  other.curriculum[2].seq_len = 2048;
  ASSERT_EQ(changed_fields(c, other).size(), 1u);
  EXPECT_EQ(changed_fields(c, other)[0].key, "curriculum");
}

TEST(Curriculum, PhasesSplitTheStepsAndKeepTheTokensOfABatch) {
  const RunConfig c = parse_run_config(kRun, "run.toml");
  check_curriculum(c);
  EXPECT_EQ(phase_ends(c), (std::vector<int64_t>{60, 90, 100}));
  EXPECT_EQ(phase_at(c, 0), 0);
  EXPECT_EQ(phase_at(c, 59), 0);
  EXPECT_EQ(phase_at(c, 60), 1);
  EXPECT_EQ(phase_at(c, 89), 1);
  EXPECT_EQ(phase_at(c, 90), 2);
  EXPECT_EQ(phase_at(c, 100), 2);
  const int64_t tokens = c.train.batch_size * c.data.seq_len;
  for (int p = 0; p < 3; ++p) {
    const RunConfig phase = phase_config(c, p);
    EXPECT_EQ(phase.train.batch_size * phase.data.seq_len, tokens);
    EXPECT_EQ(phase.data.seed, c.data.seed + p);
    EXPECT_EQ(phase.train.steps, c.train.steps);
  }
  EXPECT_EQ(phase_config(c, 2).train.batch_size, 1);
  EXPECT_EQ(phase_config(c, 0).activation.policy, "keep");
  EXPECT_FALSE(phase_config(c, 0).data.documents);
  EXPECT_EQ(phase_config(c, 1).activation.policy, "recompute");
  EXPECT_TRUE(phase_config(c, 1).data.documents);
  EXPECT_EQ(phase_config(c, 2).activation.policy, "offload");
  EXPECT_EQ(phase_config(c, 2).activation.granularity, "layer");
  EXPECT_FALSE(phase_config(c, 2).data.documents);  // a phase's settings are its own
  EXPECT_EQ(phase_config(c, -1), c);
  EXPECT_EQ(phase_at(RunConfig{}, 5), -1);
  EXPECT_TRUE(phase_ends(RunConfig{}).empty());
}

TEST(Curriculum, BadPhasesAreRefusedNamingThePhase) {
  auto parse_error = [](const std::string& phases) {
    return error_of([&] { parse_run_config(kHead + phases, "run.toml"); });
  };
  EXPECT_NE(parse_error("[[curriculum]]\nseq_len = 512\n").find("curriculum[0].share"),
            std::string::npos);
  EXPECT_NE(parse_error("[[curriculum]]\nshare = 1.5\nseq_len = 512\n").find("(0, 1]"),
            std::string::npos);
  const std::string lr = parse_error("[[curriculum]]\nshare = 1\nseq_len = 512\ntrain.lr = 1e-3\n");
  EXPECT_NE(lr.find("curriculum[0].train.lr"), std::string::npos) << lr;
  EXPECT_NE(lr.find("[eval], [activation] and [parallel]"), std::string::npos) << lr;
  const std::string typo =
      parse_error("[[curriculum]]\nshare = 1\nseq_len = 512\nactivation.polcy = \"keep\"\n");
  EXPECT_NE(typo.find("curriculum[0].activation.polcy"), std::string::npos) << typo;
  const std::string value =
      parse_error("[[curriculum]]\nshare = 1\nseq_len = 512\nparallel.cp = 0\n");
  EXPECT_NE(value.find("curriculum[0].parallel.cp"), std::string::npos) << value;
  EXPECT_NE(parse_error("[curriculum]\nshare = 1\n").find("[[curriculum]]"), std::string::npos);

  RunConfig c = parse_run_config(kRun, "run.toml");
  c.curriculum[0].share = 0.5;
  EXPECT_NE(error_of([&] { check_curriculum(c); }).find("sum to 0.9"), std::string::npos);
  c = parse_run_config(kRun, "run.toml");
  c.curriculum[2].seq_len = 3000;
  EXPECT_NE(error_of([&] { check_curriculum(c); }).find("does not divide"), std::string::npos);
  c = parse_run_config(kRun, "run.toml");
  c.train.steps = 4;  // 0.6 -> 2, 0.3 -> 4 (rounded from 3.6), 0.1 -> none
  EXPECT_NE(error_of([&] { check_curriculum(c); }).find("curriculum[2].share"), std::string::npos);
}

}  // namespace
}  // namespace k3::train::curriculum_test
