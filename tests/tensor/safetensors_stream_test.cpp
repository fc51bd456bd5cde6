// Safetensors files written and read tensor by tensor: the writer's file is encode_safetensors's
// byte for byte, its hash is the file's, and TensorFile reads by name what decoding would give.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/test_util.h"
#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/tensor/safetensors.h"
#include "tensor/safetensors_files.h"

namespace k3 {
namespace {

using testing::error_of;
using testing::filled;

std::vector<SafetensorsEntry> entries_of(const Safetensors& st) {
  std::vector<SafetensorsEntry> entries;
  for (auto& [name, t] : st.tensors) entries.push_back({name, t.dtype(), t.shape(), 0, 0});
  return entries;
}

// Writes ST with the streaming writer; returns what finish() said.
SafetensorsWriter::Written write_streamed(const std::string& path, const Safetensors& st) {
  SafetensorsWriter out(path, entries_of(st), st.metadata);
  for (auto& [name, t] : st.tensors) out.write(t.data(), t.nbytes());
  return out.finish();
}

// Tensors of several dtypes and shapes (scalar, empty), names out of sorted order, metadata.
Safetensors mixed(std::mt19937_64& rng) {
  Safetensors st;
  st.tensors = {{"z.weight", filled({3, 5}, DType::F32, rng)},
                {"a.bias", filled({7}, DType::BF16, rng)},
                {"empty", filled({0, 4}, DType::F32, rng)},
                {"scale", filled({}, DType::F32, rng)},
                {"m.layers.0.w", filled({2, 3, 4}, DType::F32, rng)}};
  st.metadata = {{"format", "pt"}};
  return st;
}

// The encoder's output before streaming existed, pinned: checkpoints written then load now.
TEST(SafetensorsStream, EncodingIsUnchanged) {
  Safetensors st;
  Tensor a = Tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) a.f32()[i] = 0.25f * static_cast<float>(i) - 1;
  Tensor b = Tensor::empty({3}, DType::BF16);
  for (int i = 0; i < 3; ++i) b.bf16()[i] = static_cast<uint16_t>(0x3f80 + i);
  Tensor s = Tensor::empty({});
  s.f32()[0] = 3.5f;
  st.tensors = {{"z.weight", a}, {"a.bias", b}, {"scale", s}, {"empty", Tensor::empty({0, 2})}};
  st.metadata = {{"format", "pt"}};
  const std::string bytes = encode_safetensors(st);
  EXPECT_EQ(bytes.size(), 322u);
  EXPECT_EQ(sha256_hex(bytes), "bf126f6a291fc9f5f352885de9a4423ce86bc37181b862f9030adbc453876bcd");
}

TEST(SafetensorsStream, WriterMatchesTheEncoderByteForByte) {
  testing::TempDir dir("k3_st_stream");
  std::mt19937_64 rng(11);
  for (bool with_metadata : {true, false}) {
    Safetensors st = mixed(rng);
    if (!with_metadata) st.metadata.clear();
    const std::string path = dir.path() + "/t.safetensors";
    const SafetensorsWriter::Written w = write_streamed(path, st);
    const std::string expected = encode_safetensors(st), on_disk = read_file(path);
    EXPECT_EQ(on_disk, expected);
    EXPECT_EQ(w.bytes, on_disk.size());
    EXPECT_EQ(w.sha256, sha256_hex(on_disk));
  }
  // No tensors at all.
  const std::string path = dir.path() + "/none.safetensors";
  EXPECT_EQ(write_streamed(path, {}).sha256, sha256_hex(encode_safetensors({})));
  EXPECT_EQ(read_file(path), encode_safetensors({}));
}

TEST(SafetensorsStream, WriterRefusesWhatDoesNotMatchItsHeader) {
  testing::TempDir dir("k3_st_stream");
  const std::string path = dir.path() + "/t.safetensors";
  const std::vector<SafetensorsEntry> two = {{"a", DType::F32, {2}, 0, 0},
                                             {"b", DType::F32, {3}, 0, 0}};
  const float values[3] = {1, 2, 3};
  {
    SafetensorsWriter out(path, two);
    EXPECT_NE(error_of([&] { out.write(values, 4); })
                  .find("field a: 4 bytes written, the header "
                        "gives it 8"),
              std::string::npos);
    out.write(values, 8);
    EXPECT_NE(error_of([&] { out.finish(); }).find("field b: finished before this tensor"),
              std::string::npos);
    out.write(values, 12);
    EXPECT_NE(error_of([&] { out.write(values, 4); }).find("more tensors written than its header"),
              std::string::npos);
  }
  // Abandoned unfinished, the writer leaves no file behind.
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::vector<SafetensorsEntry> twice = {two[0], two[0]};
  EXPECT_NE(error_of([&] { SafetensorsWriter(path, twice); }).find("two tensors have this name"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsStream, TensorFileReadsTensorsByName) {
  testing::TempDir dir("k3_st_stream");
  std::mt19937_64 rng(12);
  const Safetensors st = mixed(rng);
  const std::string path = dir.path() + "/t.safetensors";
  write_streamed(path, st);
  const TensorFile file{FileReader(path)};
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), st.metadata);
  ASSERT_EQ(file.entries().size(), st.tensors.size());
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const auto& [name, t] = st.tensors[i];
    EXPECT_EQ(file.entries()[i].name, name);  // data order
    const SafetensorsEntry& e = file.get(name, t.shape(), t.dtype());
    EXPECT_EQ(&e, file.find(name));
    const Tensor back = file.tensor(e);
    ASSERT_EQ(back.nbytes(), t.nbytes());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0) << name;
    }
    if (t.dtype() != DType::F32) continue;
    std::vector<float> buffer(static_cast<size_t>(t.numel()) + 1, -7.f);
    file.read(e, buffer.data());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(buffer.data(), t.data(), t.nbytes()), 0) << name;
    }
    EXPECT_EQ(buffer.back(), -7.f) << name << ": read past the tensor";
  }
  EXPECT_EQ(file.find("missing"), nullptr);
  EXPECT_NE(error_of([&] {
              file.get("missing", {1});
            }).find("file " + path + ", field missing: tensor is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              file.get("z.weight", {5, 3});
            }).find("field z.weight: expected F32 [5, 3], found F32 [3, 5]"),
            std::string::npos);
  float out[7];
  EXPECT_NE(
      error_of([&] { file.read(*file.find("a.bias"), out); }).find("expected F32, found BF16"),
      std::string::npos);
  EXPECT_TRUE(TensorFile().entries().empty());
}

// Opening reads the header only: a file cut short is refused as decoding refuses it, and one
// that shrinks after opening is refused when the missing bytes are read.
TEST(SafetensorsStream, TensorFileRefusesShortFiles) {
  testing::TempDir dir("k3_st_stream");
  std::mt19937_64 rng(13);
  const Safetensors st = mixed(rng);
  const std::string bytes = encode_safetensors(st);
  for (size_t keep : {size_t{3}, size_t{20}, bytes.size() - 1}) {
    const std::string path = dir.file("cut.safetensors", bytes.substr(0, keep));
    const std::string expected = error_of([&] { decode_safetensors(read_file(path), path); });
    ASSERT_NE(expected, "");
    EXPECT_EQ(error_of([&] { TensorFile{FileReader(path)}; }), expected) << keep;
  }
  const std::string path = dir.file("shrinks.safetensors", bytes);
  const TensorFile file{FileReader(path)};
  std::filesystem::resize_file(path, bytes.size() - 4);
  std::vector<float> out(60);
  EXPECT_NE(error_of([&] {
              file.read(*file.find("m.layers.0.w"), out.data());
            }).find("the file shrank while open"),
            std::string::npos);
}

}  // namespace
}  // namespace k3
