#include "k3/train/config/run_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;

// Runs F, which must throw a k3::Error whose context names FILE and FIELD and whose text says
// WHAT.
void expect_error(const std::function<void()>& f, const std::string& file, const std::string& field,
                  const std::string& what) {
  try {
    f();
    FAIL() << "expected an error for " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.context().file, file) << e.what();
    EXPECT_EQ(e.context().field, field) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

void expect_parse_error(const std::string& toml, const std::string& field,
                        const std::string& what) {
  expect_error([&] { parse_run_config(toml, "run.toml"); }, "run.toml", field, what);
}

TEST(RunConfig, Defaults) {
  RunConfig c;
  EXPECT_EQ(c.model.config, "configs/dense-tiny.json");
  EXPECT_EQ(c.model.seed, 1234);
  EXPECT_EQ(c.data.source, "builtin");
  EXPECT_EQ(c.data.seq_len, 256);
  EXPECT_EQ(c.data.seed, 1234);
  EXPECT_EQ(c.train.steps, 1000);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-3);
  EXPECT_EQ(c.train.warmup(), 50);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.sample.top_k, 40);
  EXPECT_EQ(parse_run_config(""), c);
}

TEST(RunConfig, Parse) {
  RunConfig c = parse_run_config(R"(
    [model]
    config = "configs/dense-small.json"
    [data]
    source = "corpus.txt"
    val_fraction = 0.1
    [train]
    steps = 200
    lr = 1          # an integer is accepted for a float field
    warmup_fraction = 0.25
    [sample]
    prompt = "Once upon a time"
  )");
  EXPECT_EQ(c.model.config, "configs/dense-small.json");
  EXPECT_EQ(c.data.source, "corpus.txt");
  EXPECT_DOUBLE_EQ(c.data.val_fraction, 0.1);
  EXPECT_EQ(c.train.steps, 200);
  EXPECT_DOUBLE_EQ(c.train.lr, 1.0);
  EXPECT_EQ(c.train.warmup(), 50);
  EXPECT_EQ(c.sample.prompt, "Once upon a time");
  EXPECT_EQ(c.train.batch_size, 8);  // untouched keys keep their defaults
}

TEST(RunConfig, WarmupIsAtMostTheRun) {
  TrainSection t;
  t.steps = 10;
  EXPECT_EQ(t.warmup(), 10);
}

TEST(RunConfig, Overrides) {
  RunConfig c;
  apply_override(c, "train.lr=1e-3");
  apply_override(c, " train.steps = 10 ");
  apply_override(c, "sample.prompt=Once upon a time");
  apply_override(c, "run.name=\"quoted name\"");
  apply_override(c, "run.dir=123");  // a string field takes any text
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_EQ(c.sample.prompt, "Once upon a time");
  EXPECT_EQ(c.run.name, "quoted name");
  EXPECT_EQ(c.run.dir, "123");
}

// On/off switches are TOML booleans, in a file and in --set; 0 and 1 (as older run directories
// wrote them) still read; anything else is refused naming the field.
TEST(RunConfig, SwitchesAreBooleans) {
  RunConfig c = parse_run_config(
      "[parallel]\nsequence_parallel = true\noverlap = false\n"
      "[data]\ndocuments = 1");
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_FALSE(c.parallel.overlap);
  EXPECT_TRUE(c.data.documents);
  apply_override(c, "parallel.sequence_parallel=false");
  apply_override(c, "parallel.overlap = true");
  apply_override(c, "data.documents=0");
  EXPECT_FALSE(c.parallel.sequence_parallel);
  EXPECT_TRUE(c.parallel.overlap);
  EXPECT_FALSE(c.data.documents);
  EXPECT_NE(to_toml(c).find("sequence_parallel = false"), std::string::npos) << to_toml(c);
  expect_parse_error("[parallel]\noverlap = 2", "parallel.overlap",
                     "expected true or false, found integer 2");
  expect_parse_error("[data]\ndocuments = \"yes\"", "data.documents",
                     "expected true or false, found string");
  expect_error([&] { apply_override(c, "parallel.sequence_parallel=on"); }, "",
               "parallel.sequence_parallel", "expected true or false, found string 'on'");
}

TEST(RunConfig, ErrorsNameTheField) {
  expect_parse_error("[trian]\nsteps = 1", "trian",
                     "unknown section; expected one of: model, data");
  expect_parse_error("[train]\nlrr = 1e-3", "train.lrr", "line 2: unknown key; [train] has: steps");
  expect_parse_error("train = 3", "train", "expected a table [train]");
  expect_parse_error("[train]\nlr = \"fast\"", "train.lr", "expected a number, found string");
  expect_parse_error("[train]\nsteps = 1.5", "train.steps", "expected an integer");
  expect_parse_error("[model]\nconfig = 3", "model.config", "expected a string");
  expect_parse_error("[train]\nsteps = 0", "train.steps", "expected a value > 0, got 0");
  expect_parse_error("[train]\nlr = -1e-3", "train.lr", "expected a value > 0, got -0.001");
  expect_parse_error("[train]\nlr = nan", "train.lr", "expected a finite number");
  expect_parse_error("[data]\nval_fraction = 1.0", "data.val_fraction", "a value in (0, 1)");
  expect_parse_error("[data]\nseq_len = -4", "data.seq_len", "expected a value > 0");
  expect_parse_error("[sample]\ntop_p = 0", "sample.top_p", "a value in (0, 1]");
  expect_parse_error("[train]\nbeta2 = 1", "train.beta2", "a value in [0, 1)");
  expect_parse_error("[train]\nlr = ", "", "TOML syntax error at line 2");
}

TEST(RunConfig, OverrideErrorsNameTheField) {
  RunConfig c;
  expect_error([&] { apply_override(c, "train.lr"); }, "", "train.lr",
               "expected --set section.key=value");
  expect_error([&] { apply_override(c, "train.rate=1"); }, "", "train.rate", "unknown key");
  expect_error([&] { apply_override(c, "train.lr=fast"); }, "", "train.lr",
               "--set train.lr=fast: expected a number, found string");
  expect_error([&] { apply_override(c, "data.val_fraction=1"); }, "", "data.val_fraction",
               "expected a value in (0, 1), got 1.0");
  EXPECT_EQ(c, RunConfig{});  // a rejected override changes nothing
}

TEST(RunConfig, RoundTripThroughToml) {
  RunConfig c;
  c.model.config = "/abs/model.json";
  c.data.val_fraction = 0.1;
  c.train.lr = 1.0 / 3.0;
  c.train.eps = 1e-8;
  c.train.grad_clip = 0;
  c.sample.prompt = "say \"hi\"\n\tback\\slash \x01";
  c.run.name = "tiny";
  const std::string toml = to_toml(c);
  EXPECT_NE(toml.find("[train]\nsteps = 1000"), std::string::npos) << toml;
  EXPECT_NE(toml.find("grad_clip = 0.0"), std::string::npos) << toml;
  EXPECT_EQ(parse_run_config(toml), c) << toml;
  EXPECT_EQ(parse_run_config(to_toml(RunConfig{})), RunConfig{});
}

// The reference page's rows: each key once, its default the default RunConfig's value (the rows,
// read back as TOML, give the defaults), its allowed range the text validation reports.
TEST(RunConfig, FieldDocsDescribeTheTable) {
  const std::vector<FieldDoc> docs = run_config_fields();
  std::string toml, section;
  std::set<std::string> keys;
  for (const FieldDoc& f : docs) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_FALSE(f.type.empty() || f.allowed.empty() || f.doc.empty()) << f.key;
    const std::string s = f.key.substr(0, f.key.find('.'));
    if (s != section) toml += "[" + (section = s) + "]\n";
    toml += f.key.substr(s.size() + 1) + " = " + f.default_value + "\n";
  }
  EXPECT_EQ(parse_run_config(toml), RunConfig{}) << toml;
  auto doc_of = [&](const std::string& key) {
    for (const FieldDoc& f : docs)
      if (f.key == key) return f;
    ADD_FAILURE() << "no row for " << key;
    return FieldDoc{};
  };
  EXPECT_EQ(doc_of("train.optimizer").allowed, "one of \"muon\" \"adamw\"");
  EXPECT_EQ(doc_of("data.source").allowed,
            "\"builtin\" or \"image_text\" or \"shards\" or an existing path");
  EXPECT_EQ(doc_of("train.lr").type, "number");
  for (const char* bad :
       {"train.lr=-1", "train.beta1=1", "sample.top_k=-2", "train.schedule=\"step\""}) {
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    RunConfig c;
    const std::string e = testing::error_of([&] { apply_override(c, bad); });
    EXPECT_NE(e.find("expected " + doc_of(key).allowed + ", got"), std::string::npos) << e;
  }
}

class LoadRunConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "configs");
    write_file_atomic((dir_ / "configs" / "model.json").string(), "{}");
  }
  std::string write_toml(const std::string& text) {
    const std::string path = (dir_ / "configs" / "tiny-run.toml").string();
    write_file_atomic(path, text);
    return path;
  }
  testing::TempDir tmp_{"k3_run_config"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(LoadRunConfig, ResolvesPathsAndDerivesTheRunDirectory) {
  const std::string path = write_toml("[model]\nconfig = \"model.json\"\n");
  RunConfig c = load_run_config(path, {"train.steps=7"});
  EXPECT_EQ(c.model.config, (dir_ / "configs" / "model.json").string());
  EXPECT_EQ(c.data.source, "builtin");
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.run.name, "tiny-run");
  EXPECT_EQ(c.run.dir, "runs/tiny-run");
  // The saved configuration loads to the same values from anywhere.
  const std::string saved = (dir_ / "resolved.toml").string();
  write_file_atomic(saved, to_toml(c));
  EXPECT_EQ(load_run_config(saved), c);
}

TEST_F(LoadRunConfig, MissingInputNamesTheField) {
  const std::string path =
      write_toml("[data]\nsource = \"nowhere.txt\"\n[model]\nconfig = \"model.json\"\n");
  expect_error([&] { load_run_config(path); }, path, "data.source", "file not found: nowhere.txt");
  expect_error(
      [&] {
        load_run_config(path, {"data.source=builtin", "model.config=gone.json"});
      },
      path, "model.config", "file not found");
}

// Fields valid one by one can still make no schedule: an exponential decay needs a floor above 0.
TEST_F(LoadRunConfig, TheScheduleIsCheckedAsAWhole) {
  const std::string path = write_toml(
      "[model]\nconfig = \"model.json\"\n[train]\nschedule = \"wsd\"\ndecay_shape = \"exp\"\n");
  EXPECT_NO_THROW(load_run_config(path));
  expect_error([&] { load_run_config(path, {"train.min_lr_ratio=0"}); }, path, "train.min_lr_ratio",
               "floor above 0");
}

TEST_F(LoadRunConfig, MissingTomlFileIsNamed) {
  const std::string path = (dir_ / "absent.toml").string();
  expect_error([&] { load_run_config(path); }, path, "", "cannot open");
}

// A resumed run starts from its checkpoint's configuration, whose input files may be gone.
TEST_F(LoadRunConfig, ABaseKeepsItsPathsUnlessTheyChange) {
  RunConfig base = load_run_config(write_toml("[model]\nconfig = \"model.json\"\n"));
  base.model.config = (dir_ / "moved-away.json").string();
  RunConfig resumed = load_run_config("", {"train.steps=7"}, &base);
  EXPECT_EQ(resumed.model.config, base.model.config);
  EXPECT_EQ(resumed.train.steps, 7);
  expect_error([&] { load_run_config("", {"model.config=gone.json"}, &base); }, "", "model.config",
               "file not found");
}

TEST(ChangedFields, ListsEachDifferenceInTableOrder) {
  RunConfig a, b;
  EXPECT_TRUE(changed_fields(a, b).empty());
  b.train.batch_size = 2;
  b.data.seq_len = 64;
  const std::vector<FieldChange> changes = changed_fields(a, b);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "data.seq_len");
  EXPECT_EQ(changes[0].from, "256");
  EXPECT_EQ(changes[0].to, "64");
  EXPECT_EQ(changes[1].key, "train.batch_size");
}

}  // namespace
}  // namespace k3::train
