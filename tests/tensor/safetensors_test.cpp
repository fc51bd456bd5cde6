#include "k3/tensor/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "k3/base/error.h"
#include "tensor/safetensors_files.h"

namespace k3 {
namespace {

using testing::filled;
using testing::safetensors_file;
using testing::tensor_entry;

// "{" + ENTRY, the start of a header. (`"{" + <temporary string>` inserts in front, which GCC 12
// may report as an overlapping memcpy, -Wrestrict.)
std::string braced(const std::string& entry) { return "{" + entry; }

// Decoding fails with one line that names the file, the tensor (its context field; "" when the
// error is about no tensor) and says `what`.
::testing::AssertionResult refused(const std::string& bytes, const std::string& tensor,
                                   const std::string& what) {
  try {
    decode_safetensors(bytes, "t.safetensors");
    return ::testing::AssertionFailure() << "decoded, expected: " << what;
  } catch (const Error& e) {
    const std::string m = e.what();
    if (e.context().file != "t.safetensors" || e.context().field != tensor ||
        m.find(what) == std::string::npos || m.find('\n') != std::string::npos)
      return ::testing::AssertionFailure() << "message: " << m;
    return ::testing::AssertionSuccess();
  }
}

::testing::AssertionResult refused(const std::string& header, size_t data_size,
                                   const std::string& tensor, const std::string& what) {
  return refused(safetensors_file(header, data_size), tensor, what);
}

TEST(Safetensors, RoundTripIsByteIdentical) {
  std::mt19937_64 rng(7);
  Safetensors st;
  // Names out of alphabetical order: the header lists them sorted, the data keeps this order.
  st.tensors.emplace_back("z", filled({2, 3}, DType::F32, rng));
  st.tensors.emplace_back("empty", filled({0, 4}, DType::F32, rng));
  st.tensors.emplace_back("b", filled({5}, DType::BF16, rng));
  st.tensors.emplace_back("scalar", filled({}, DType::F32, rng));
  st.metadata["step"] = "7";
  std::string bytes = encode_safetensors(st);
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  Safetensors back = decode_safetensors(bytes, "mem");
  EXPECT_EQ(back.metadata, st.metadata);
  ASSERT_EQ(back.tensors.size(), st.tensors.size());
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const Tensor& t = st.tensors[i].second;
    EXPECT_EQ(back.tensors[i].first, st.tensors[i].first);
    const Tensor& t2 = back.get(st.tensors[i].first, t.shape(), t.dtype());
    if (t.nbytes()) {  // an empty tensor has no storage to compare
      EXPECT_EQ(std::memcmp(t2.data(), t.data(), t.nbytes()), 0);
    }
  }
  EXPECT_EQ(encode_safetensors(back), bytes);
  EXPECT_THROW(back.get("z", {3, 2}), Error);
  EXPECT_THROW(back.get("missing", {1}), Error);
}

TEST(Safetensors, AcceptsEntriesInAnyOrderAndPaddedHeaders) {
  // "a" holds the second range; empty tensors may sit at any boundary.
  std::string header = braced(tensor_entry("a", "BF16", "[2]", "[8,12]")) + "," +
                       tensor_entry("b", "F32", "[2]", "[0,8]") + "," +
                       tensor_entry("c", "F32", "[0]", "[8,8]") + "," +
                       tensor_entry("d", "F32", "[3,0]", "[12,12]") + "}    ";
  Safetensors st = decode_safetensors(safetensors_file(header, 12), "mem");
  ASSERT_EQ(st.tensors.size(), 4u);
  EXPECT_EQ(st.tensors[0].first, "b");
  EXPECT_EQ(st.tensors[1].first, "c");
  EXPECT_EQ(st.tensors[2].first, "a");
  EXPECT_EQ(st.tensors[3].first, "d");
  EXPECT_EQ(static_cast<uint8_t*>(st.tensors[2].second.data())[0], 7 * 8 + 1);
  EXPECT_TRUE(decode_safetensors(safetensors_file("{}  ", 0), "mem").tensors.empty());
}

TEST(Safetensors, RefusesShapesWhoseSizeOverflows) {
  auto header = [](const std::string& shape) {
    return braced(tensor_entry("big", "F32", shape, "[0,0]")) + "}";
  };
  // 2^80 elements, 2^64 bytes, 2^63 elements, and 2^64 elements before a 0: each wraps to 0.
  EXPECT_TRUE(refused(header("[1099511627776,1099511627776]"), 0, "big", "too many elements"));
  EXPECT_TRUE(refused(header("[4611686018427387904]"), 0, "big", "too many bytes"));
  EXPECT_TRUE(refused(header("[9223372036854775808,0]"), 0, "big", "too many elements"));
  EXPECT_TRUE(refused(header("[4294967296,4294967296,0]"), 0, "big", "too many elements"));
}

TEST(Safetensors, RefusesOverlappingTensors) {
  std::string header = braced(tensor_entry("a", "F32", "[4]", "[0,16]")) + "," +
                       tensor_entry("b", "F32", "[2]", "[8,16]") + "}";
  EXPECT_TRUE(refused(header, 16, "b", "its bytes [8, 16) overlap tensor a, which ends at 16"));
  std::string inside = braced(tensor_entry("a", "F32", "[4]", "[0,16]")) + "," +
                       tensor_entry("e", "F32", "[0]", "[4,4]") + "}";
  EXPECT_TRUE(refused(inside, 16, "e", "overlap tensor a"));
}

TEST(Safetensors, RefusesHolesBetweenTensors) {
  std::string header = braced(tensor_entry("a", "F32", "[2]", "[0,8]")) + "," +
                       tensor_entry("b", "F32", "[2]", "[16,24]") + "}";
  EXPECT_TRUE(refused(header, 24, "b", "bytes [8, 16) before it belong to no tensor"));
  std::string first = braced(tensor_entry("a", "F32", "[2]", "[4,12]")) + "}";
  EXPECT_TRUE(refused(first, 12, "a", "bytes [0, 4) before it belong to no tensor"));
}

TEST(Safetensors, RefusesBytesAfterTheLastTensor) {
  std::string header = braced(tensor_entry("a", "F32", "[2]", "[0,8]")) + "}";
  EXPECT_TRUE(refused(header, 12, "a", "bytes [8, 12) at the end of the data belong to no tensor"));
  EXPECT_TRUE(refused("{}", 4, "", "bytes [0, 4) at the end"));
}

TEST(Safetensors, RefusesKeysGivenTwice) {
  // Identical entries: keeping either would decode, so only the repetition itself is wrong.
  std::string a = tensor_entry("a", "F32", "[2]", "[0,8]");
  EXPECT_TRUE(refused("{" + a + "," + a + "}", 8, "a", "name given twice"));
  std::string field =
      "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  EXPECT_TRUE(refused(field, 8, "a", "key 'dtype' given twice"));
  EXPECT_TRUE(refused("{\"__metadata__\":{\"k\":\"1\",\"k\":\"1\"}}", 0, "__metadata__",
                      "key 'k' given twice"));
}

TEST(Safetensors, ReadsMetadataAsAnObjectOfStrings) {
  Safetensors st = decode_safetensors(
      safetensors_file("{\"__metadata__\":{\"format\":\"pt\",\"step\":\"3\"}}", 0), "mem");
  EXPECT_EQ(st.metadata.at("step"), "3");
  EXPECT_TRUE(st.tensors.empty());
  EXPECT_TRUE(refused("{\"__metadata__\":[\"x\"]}", 0, "__metadata__", "must be an object"));
  EXPECT_TRUE(refused("{\"__metadata__\":{\"step\":3}}", 0, "__metadata__",
                      "values must be strings, 'step' holds 3"));
}

TEST(Safetensors, RefusesATensorCalledMetadata) {
  std::string header = braced(tensor_entry("__metadata__", "F32", "[2]", "[0,8]")) + "}";
  EXPECT_TRUE(refused(header, 8, "__metadata__", "a tensor may not be called __metadata__"));
  Safetensors st;
  st.tensors.emplace_back("__metadata__", Tensor::zeros({1}));
  EXPECT_THROW(encode_safetensors(st), Error);
}

TEST(Safetensors, EncoderRefusesANameUsedTwice) {
  Safetensors st;
  st.tensors.emplace_back("a", Tensor::zeros({1}));
  st.tensors.emplace_back("a", Tensor::zeros({2}));
  EXPECT_THROW(encode_safetensors(st), Error);
}

TEST(Safetensors, RefusesMalformedEntries) {
  EXPECT_TRUE(refused("{\"a\":5}", 8, "a", "a tensor entry must be"));
  EXPECT_TRUE(refused("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a", "lacks 'dtype'"));
  EXPECT_TRUE(
      refused("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "a", "lacks 'shape'"));
  EXPECT_TRUE(refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "a", "lacks 'data_offsets'"));
  EXPECT_TRUE(refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
                      "a", "unknown key 'x'"));
  EXPECT_TRUE(refused("{\"a\":{\"dtype\":1,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a",
                      "dtype must be the name of a type, found 1"));
  EXPECT_TRUE(refused("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, "a",
                      "shape must be a list of dimensions"));
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F32", "[2.0]", "[0,8]")) + "}", 8, "a",
                      "dimensions must be non-negative integers, found 2.0"));
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F32", "[\"2\"]", "[0,8]")) + "}", 8, "a",
                      "dimensions must be non-negative integers"));
  EXPECT_TRUE(refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8, "a",
                      "data_offsets must be [begin, end], found {}"));
}

TEST(Safetensors, RefusesUnknownDtypes) {
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F16", "[4]", "[0,8]")) + "}", 8, "a",
                      "unknown dtype 'F16'"));
}

TEST(Safetensors, RefusesNegativeDimensions) {
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F32", "[-2,-1]", "[0,8]")) + "}", 8, "a",
                      "dimensions must be non-negative integers, found -2"));
}

TEST(Safetensors, RefusesDataOffsetsThatAreNotARangeOfTheData) {
  auto header = [](const std::string& offsets) {
    return braced(tensor_entry("a", "F32", "[2]", offsets)) + "}";
  };
  EXPECT_TRUE(refused(header("[0]"), 8, "a", "data_offsets must be [begin, end], found [0]"));
  EXPECT_TRUE(refused(header("[0,8,8]"), 8, "a", "data_offsets must be [begin, end]"));
  EXPECT_TRUE(refused(header("[-8,0]"), 8, "a", "data_offsets must be non-negative integers"));
  EXPECT_TRUE(refused(header("[0,8.0]"), 8, "a", "data_offsets must be non-negative integers"));
  EXPECT_TRUE(refused(header("[8,0]"), 8, "a", "[8, 0] is not a range within the 8 bytes"));
  EXPECT_TRUE(refused(header("[8,16]"), 8, "a", "[8, 16] is not a range within the 8 bytes"));
  EXPECT_TRUE(refused(header("[0,4]"), 8, "a", "hold 4 bytes, F32 [2] needs 8"));
}

TEST(Safetensors, RefusesHeaderLengthsBeyondTheFile) {
  std::string header = braced(tensor_entry("a", "F32", "[2]", "[0,8]")) + "}";
  EXPECT_TRUE(refused(safetensors_file(header, 8, header.size() + 9), "", "exceeds the"));
  // Absurd lengths must not wrap around when 8 is added to them.
  EXPECT_TRUE(refused(safetensors_file(header, 8, ~uint64_t{0}), "", "exceeds the"));
  EXPECT_TRUE(refused(safetensors_file(header, 8, ~uint64_t{0} - 7), "", "exceeds the"));
  EXPECT_TRUE(refused(std::string(7, '\0'), "", "not a safetensors file"));
}

TEST(Safetensors, RefusesHeadersThatAreNotAJsonObject) {
  EXPECT_TRUE(refused("[]", 0, "", "does not start with '{'"));
  EXPECT_TRUE(refused(" {}", 0, "", "does not start with '{'"));
  EXPECT_TRUE(refused("", 0, "", "does not start with '{'"));
  EXPECT_TRUE(refused("{} x", 0, "", "invalid safetensors header"));
  // A header cut short names the tensor being read.
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F32", "[2]", "[0,8]")), 8, "a",
                      "invalid safetensors header"));
}

TEST(Safetensors, RefusesInvalidUtf8) {
  EXPECT_TRUE(refused(braced(tensor_entry("a\xff", "F32", "[2]", "[0,8]")) + "}", 8, "",
                      "invalid safetensors header"));
}

TEST(Safetensors, NamesWithControlCharactersStayOnOneLine) {
  std::string header = braced(tensor_entry("a\\nb", "F16", "[2]", "[0,4]")) + "}";
  EXPECT_TRUE(refused(header, 4, "\"a\\nb\"", "unknown dtype"));
  EXPECT_TRUE(refused(braced(tensor_entry("a", "F\\n32", "[2]", "[0,8]")) + "}", 8, "a",
                      "dtype must be the name of a type, found \"F\\n32\""));
}

}  // namespace
}  // namespace k3
