#include <gtest/gtest.h>

#include "k3/train/session.h"

namespace k3::train {
namespace {

// The built-in corpus of a run with the given seeds (no model needed to load the data).
data::TokenDataset builtin_data(int64_t model_seed, int64_t data_seed) {
  RunConfig config;
  config.model.seed = model_seed;
  config.data.seed = data_seed;
  config.data.builtin_tokens = 20000;
  return load_run_dataset(config, *run_tokenizer(config));
}

TEST(RunDataset, FollowsDataSeedNotModelSeed) {
  const data::TokenDataset base = builtin_data(1234, 1234);
  const data::TokenDataset other_model = builtin_data(7, 1234);
  EXPECT_EQ(other_model.train, base.train);
  EXPECT_EQ(other_model.validation, base.validation);
  const data::TokenDataset other_data = builtin_data(1234, 7);
  EXPECT_NE(other_data.train, base.train);
}

}  // namespace
}  // namespace k3::train
