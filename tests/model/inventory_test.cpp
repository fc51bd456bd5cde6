// The released K3 configuration yields exactly the text-model tensors of the released checkpoint
// (../shared/reference/kimi-k3/weights.tsv): same names, shapes and dtypes. Routed experts are
// compared in their logical (unpacked) shapes; A_log is [H_k] where the checkpoint pads it to 128.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>

#include "common/k3_weights.h"
#include "common/test_util.h"
#include "k3/model/inventory.h"

namespace k3::model {
namespace {

struct Expected {
  Shape shape;
  std::string dtype;
};

std::vector<int64_t> layers_of(const std::string& spec, const ModelConfig& c) {
  std::vector<int64_t> out;
  if (spec == "-") return {-1};
  if (spec == "KDA" || spec == "MLA") {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const bool kda = mixer_kind(c, l) == MixerKind::KDA;
      if (kda == (spec == "KDA")) out.push_back(l);
    }
    return out;
  }
  std::smatch m;
  std::string range = spec.substr(0, spec.find(','));
  if (std::regex_match(range, m, std::regex(R"((\d+)-(\d+))")))
    for (int64_t l = std::stoll(m[1]); l <= std::stoll(m[2]); ++l) out.push_back(l);
  else
    out.push_back(std::stoll(range));
  return out;
}

std::map<std::string, Expected> released_inventory(const ModelConfig& c) {
  std::ifstream in(testing::shared_dir() + "/reference/kimi-k3/weights.tsv");
  EXPECT_TRUE(in.good());
  std::map<std::string, Expected> out;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    if (!testing::is_tensor_row(line)) continue;
    const std::vector<std::string> col = testing::split_row(line);
    std::string name = col[0], dtype = col[3];
    if (name.rfind("vision_tower", 0) == 0 || name.rfind("mm_projector", 0) == 0) continue;
    Shape shape = testing::parse_shape(col[2]);
    if (name.find("weight_scale") != std::string::npos) continue;  // MXFP4 packing detail
    if (name.find("weight_packed") != std::string::npos) {          // compare the logical tensor
      std::smatch m;
      EXPECT_TRUE(std::regex_search(col[4], m, std::regex(R"(logical (\[[0-9, ]+\]))"))) << line;
      name = testing::replace(name, "weight_packed", "weight");
      shape = testing::parse_shape(m[1]);
      dtype = "bf16";  // the logical weights are ordinary matrices
    }
    const bool experts = name.find("{e}") != std::string::npos;
    for (int64_t l : layers_of(col[1], c))
      for (int64_t e = 0; e < (experts ? c.num_experts : 1); ++e) {
        const std::string full = testing::replace(testing::replace(name, "{l}", std::to_string(l)),
                                                  "{e}", std::to_string(e));
        out[full] = {shape, dtype};
      }
  }
  return out;
}

TEST(Inventory, ReleasedConfigMatchesTheCheckpointTensorList) {
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/config.json", "the released K3 config");
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/weights.tsv", "the released K3 tensor list");
  const ModelConfig c = load_model_config(testing::shared_dir() + "/reference/kimi-k3/config.json");
  Model model(c, /*allocate=*/false);
  std::map<std::string, Expected> want = released_inventory(c);
  std::vector<TensorEntry> have = tensor_inventory(model);
  EXPECT_EQ(have.size(), want.size());
  size_t mismatches = 0;
  for (const TensorEntry& t : have) {
    auto it = want.find(t.name);
    if (it == want.end()) {
      if (++mismatches < 10) ADD_FAILURE() << "not in the checkpoint: " << t.name;
      continue;
    }
    Shape expect = it->second.shape;
    if (t.name.find("A_log") != std::string::npos) expect = {c.kda_num_heads};  // padded to 128 there
    if (t.shape != expect || t.release_dtype != it->second.dtype)
      if (++mismatches < 10)
        ADD_FAILURE() << t.name << ": " << shape_str(t.shape) << " " << t.release_dtype << ", checkpoint "
                      << shape_str(it->second.shape) << " " << it->second.dtype;
    want.erase(it);
  }
  for (auto& [name, e] : want)
    if (++mismatches < 20) ADD_FAILURE() << "missing from k3lab: " << name;
  EXPECT_EQ(mismatches, 0u);
  // 2.78T parameters in total (math §1).
  EXPECT_NEAR(static_cast<double>(parameter_counts(model).back().total), 2.78e12, 0.01e12);
}

}  // namespace
}  // namespace k3::model
