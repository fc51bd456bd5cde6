// Saving and loading a checkpoint holds one tensor at a time, never a file: the peak resident
// memory a 96 MiB checkpoint of 1 MiB tensors adds stays far below the file's size. The kernel's
// peak counter (VmHWM) is reset before each phase, so what earlier tests touched does not count;
// the expected growth (one 1 MiB tensor plus the 4 MiB verification chunk) is a sixth of the
// bound, and a whole file held once already exceeds it sixfold.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "common/test_util.h"
#include "k3/train/checkpoint/checkpoint.h"

namespace k3::train {
namespace {

constexpr int kTensors = 96;
constexpr int64_t kFloats = int64_t{1} << 18;  // 1 MiB each
constexpr int64_t kBound = int64_t{16} << 20;

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes.
int64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

// Resets the peak to the current resident size; false where the kernel does not allow it.
bool reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.close();
  return out.good() && status_bytes("VmHWM") >= 0;
}

float value(int t, int64_t i) { return static_cast<float>(t) + static_cast<float>(i % 1000); }

TEST(CheckpointMemory, SavingAndLoadingHoldOneTensorNotTheFile) {
  if (!reset_peak()) GTEST_SKIP() << "the peak resident size cannot be reset here";
  testing::TempDir run("k3_ck_memory");
  CheckpointContents ck;
  for (int t = 0; t < kTensors; ++t)
    ck.model.push_back({"w." + std::to_string(t), {512, 512}, [t](float* out) {
                          for (int64_t i = 0; i < kFloats; ++i) out[i] = value(t, i);
                        }});

  ASSERT_TRUE(reset_peak());
  int64_t before = status_bytes("VmRSS");
  const std::string dir = save_checkpoint(run.path(), 1, ck);
  const int64_t save_growth = status_bytes("VmHWM") - before;

  // The destination (a rank's shard: here every tensor) is resident before the load starts.
  std::vector<float> shard(static_cast<size_t>(kTensors * kFloats), 1.f);
  ASSERT_TRUE(reset_peak());
  before = status_bytes("VmRSS");
  {
    const Checkpoint loaded = load_checkpoint(dir);
    ASSERT_EQ(loaded.model.entries().size(), static_cast<size_t>(kTensors));
    std::vector<float> tensor(static_cast<size_t>(kFloats));
    for (int t = 0; t < kTensors; ++t) {
      loaded.model.read(loaded.model.get("w." + std::to_string(t), {512, 512}), tensor.data());
      std::memcpy(shard.data() + t * kFloats, tensor.data(), sizeof(float) * kFloats);
    }
  }
  const int64_t load_growth = status_bytes("VmHWM") - before;
  for (int t = 0; t < kTensors; t += 17)
    EXPECT_EQ(shard[static_cast<size_t>(t * kFloats + 999)], value(t, 999));

  std::cout << "a " << (kTensors * kFloats * 4 >> 20) << " MiB checkpoint: saving added "
            << (save_growth >> 10) << " KiB resident at its peak, loading " << (load_growth >> 10)
            << " KiB\n";
  EXPECT_LT(save_growth, kBound);
  EXPECT_LT(load_growth, kBound);
}

}  // namespace
}  // namespace k3::train
