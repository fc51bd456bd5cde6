// Mutated safetensors files, from a fixed seed: each one either decodes to tensors that an
// independent re-check of the file finds consistent, or is refused with a k3::Error. A crash, a
// memory error (under the asan preset), another exception or a hang fails the test.
//
// Allocation: decode_safetensors allocates tensors only after read_safetensors_layout has
// accepted the header, and then exactly the layout's entries. So whenever the layout is refused,
// decoding must be refused with the same message (nothing allocated yet); whenever it is
// accepted, the re-check recomputes each entry's byte count from its dtype and shape in 128-bit
// arithmetic and checks the entries tile the data, so the tensors together hold exactly the
// data's bytes, never more than the file. (The parsed JSON header grows with the header text,
// which is itself part of the file.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/tensor/safetensors.h"
#include "tensor/safetensors_files.h"

namespace k3 {
namespace {

using nlohmann::json;
using testing::filled;

// Valid files to start from: several dtypes and shapes (scalar, empty), names whose sorted order
// differs from the data's, with and without metadata, and one written by hand with its entries
// out of data order and padded.
std::vector<std::string> valid_files(std::mt19937_64& rng) {
  std::vector<Safetensors> sets(4);
  sets[0].tensors = {{"w", filled({2, 3}, DType::F32, rng)},
                     {"b", filled({3}, DType::BF16, rng)},
                     {"scale", filled({}, DType::F32, rng)}};
  sets[0].metadata = {{"format", "pt"}, {"step", "12"}};
  sets[1].tensors = {{"z", filled({4}, DType::F32, rng)},
                     {"a", filled({2, 2}, DType::BF16, rng)},
                     {"empty", filled({0, 5}, DType::F32, rng)},
                     {"m", filled({1}, DType::F32, rng)}};
  sets[2].tensors = {{"layers.0.kda.q", filled({3, 1, 2}, DType::BF16, rng)}};
  sets[3].metadata = {{"only", "metadata"}};
  std::vector<std::string> files;
  for (auto& st : sets) files.push_back(encode_safetensors(st));
  files.push_back(testing::safetensors_file(
      "{ " + testing::tensor_entry("b", "F32", "[2]", "[8, 16]") + ", " +
          testing::tensor_entry("a", "BF16", "[2, 2]", "[0, 8]") + " }       ",
      16));
  return files;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // A mutated copy of `file`: 1 to 3 changes to the header text, the data or the whole file.
  std::string mutate(const std::string& file) {
    uint64_t size_field;
    std::memcpy(&size_field, file.data(), 8);
    std::string header = file.substr(8, size_field), data = file.substr(8 + size_field);
    std::vector<int> file_ops;  // 0-7 edit the header text, 8 the data, 9-11 the whole file
    for (int n = 1 + below(3); n > 0; --n) {
      int op = below(12);
      if (op < 8)
        mutate_header(header, op);
      else if (op == 8 && !data.empty())
        data[below(data.size())] ^= 1 << below(8);
      else
        file_ops.push_back(op);
    }
    std::string bytes = testing::safetensors_file(header, 0) + data;
    for (int op : file_ops) mutate_file(bytes, op);
    return bytes;
  }

 private:
  size_t below(size_t n) { return rng_() % n; }  // n > 0
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  void mutate_header(std::string& h, int op) {
    static const std::vector<std::string> tokens = {
        "{",    "}",        "[",    "]",    ",",     ":",  "\"",  "0",
        "-",    "9",        " ",    "e",    ".",     "\\", "\\n", "\\u0000",
        "\xff", "\xc3\xa9", "null", "true", "\"x\"", "{}", "[]",  "\"__metadata__\":{}"};
    static const std::vector<std::string> numbers = {"18446744073709551615",
                                                     "18446744073709551616",
                                                     "9223372036854775807",
                                                     "9223372036854775808",
                                                     "4294967296",
                                                     "1099511627776",
                                                     "-1",
                                                     "0",
                                                     "1e3",
                                                     "2.5",
                                                     "-0",
                                                     "99999999999999999999999"};
    static const std::vector<std::string> words = {
        "F32", "BF16", "F16", "__metadata__", "dtype", "shape", "data_offsets", "a", "b"};
    const size_t at = below(h.size() + 1);
    switch (op) {
      case 0:
        if (!h.empty()) h[std::min(at, h.size() - 1)] ^= 1 << below(8);
        break;
      case 1:
        h.resize(at);
        break;
      case 2:
        h.insert(at, pick(tokens));
        break;
      case 3:
        h.erase(at, 1 + below(8));
        break;
      case 4:
        swap_numbers(h);
        break;
      case 5:
        replace_one(h, number_spans(h), pick(numbers));
        break;
      case 6:
        replace_one(h, quoted_spans(h), "\"" + pick(words) + "\"");
        break;
      case 7:
        repeat_entry(h);
        break;
    }
  }

  void mutate_file(std::string& bytes, int op) {
    if (op == 9) {
      bytes.resize(below(bytes.size() + 1));
    } else if (op == 10) {
      for (int n = 1 + below(16); n > 0; --n) bytes += static_cast<char>(rng_());
    } else if (bytes.size() >= 8) {
      static const std::vector<uint64_t> sizes = {
          0, 1, 7, 8, uint64_t{1} << 63, ~uint64_t{0}, ~uint64_t{0} - 7};
      uint64_t size_field;
      std::memcpy(&size_field, bytes.data(), 8);
      switch (below(4)) {
        case 0:
          size_field = pick(sizes);
          break;
        case 1:
          size_field += static_cast<int>(below(17)) - 8;
          break;
        case 2:
          size_field = below(bytes.size() + 1);
          break;
        default:
          size_field = rng_();
          break;
      }
      std::memcpy(bytes.data(), &size_field, 8);
    }
  }

  using Spans = std::vector<std::pair<size_t, size_t>>;  // [begin, end) of tokens in the text

  static Spans number_spans(const std::string& h) {
    Spans spans;
    for (size_t i = 0; i < h.size();) {
      size_t j = i + (h[i] == '-');
      size_t k = j;
      while (k < h.size() && std::isdigit(static_cast<unsigned char>(h[k]))) ++k;
      if (k > j) spans.emplace_back(i, k);
      i = std::max(k, i + 1);
    }
    return spans;
  }

  static Spans quoted_spans(const std::string& h) {
    Spans spans;
    for (size_t i = h.find('"'); i != std::string::npos;) {
      size_t j = h.find('"', i + 1);
      if (j == std::string::npos) break;
      spans.emplace_back(i, j + 1);
      i = h.find('"', j + 1);
    }
    return spans;
  }

  void replace_one(std::string& h, const Spans& spans, const std::string& with) {
    if (spans.empty()) return;
    auto [b, e] = pick(spans);
    h.replace(b, e - b, with);
  }

  void swap_numbers(std::string& h) {
    Spans spans = number_spans(h);
    if (spans.size() < 2) return;
    auto x = pick(spans), y = pick(spans);
    if (x.first > y.first) std::swap(x, y);
    if (x.second > y.first) return;
    std::string a = h.substr(x.first, x.second - x.first),
                b = h.substr(y.first, y.second - y.first);
    h.replace(y.first, b.size(), a);
    h.replace(x.first, a.size(), b);
  }

  // Repeats an object entry `"key":{...}` right after itself: a tensor named twice, or (when
  // the key is a field inside an entry and its value not an object) nothing happens.
  void repeat_entry(std::string& h) {
    Spans keys = quoted_spans(h);
    if (keys.empty()) return;
    auto [b, e] = pick(keys);
    if (h.compare(e, 2, ":{") != 0) return;
    size_t close = h.find('}', e);
    if (close == std::string::npos) return;
    std::string entry = h.substr(b, close + 1 - b);
    h.insert(close + 1, "," + entry);
  }

  std::mt19937_64 rng_;
};

// Bytes a tensor of this dtype name and shape needs, or -1 when the shape is not non-negative
// integers or the count does not fit in 64 bits.
__int128 needed_bytes(const json& dtype, const json& shape) {
  __int128 n = dtype == "F32" ? 4 : 2;
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) return -1;
    n *= d.get<uint64_t>();
    if (n > (static_cast<__int128>(1) << 64)) return -1;
  }
  return n;
}

// An accepted file, re-checked against its own header read without the reader under test.
void recheck(const std::string& bytes, const SafetensorsLayout& layout, const Safetensors& st) {
  uint64_t size_field;
  std::memcpy(&size_field, bytes.data(), 8);
  ASSERT_EQ(layout.data_begin, 8 + size_field);
  ASSERT_LE(layout.data_begin, bytes.size());
  ASSERT_EQ(bytes[8], '{');
  size_t top_level_keys =
      0;  // counted while parsing: the parsed object keeps one of a repeated key
  json header =
      json::parse(bytes.substr(8, size_field), [&](int depth, json::parse_event_t event, json&) {
        top_level_keys += depth == 1 && event == json::parse_event_t::key;
        return true;
      });
  const size_t data_size = bytes.size() - layout.data_begin;
  size_t covered = 0;
  std::set<std::string> names;
  for (const SafetensorsEntry& e : layout.entries) {
    ASSERT_TRUE(header.contains(e.name) && e.name != "__metadata__") << e.name;
    ASSERT_TRUE(names.insert(e.name).second) << e.name;
    const json& entry = header[e.name];
    EXPECT_EQ(entry["dtype"], dtype_name(e.dtype));
    EXPECT_EQ(entry["shape"], json(e.shape));
    EXPECT_EQ(entry["data_offsets"], json({e.begin, e.end}));
    ASSERT_EQ(e.begin, covered) << e.name;
    ASSERT_EQ(needed_bytes(entry["dtype"], entry["shape"]), e.end - e.begin) << e.name;
    covered = e.end;
  }
  ASSERT_EQ(covered, data_size);
  EXPECT_EQ(names.size() + header.contains("__metadata__"), top_level_keys);
  if (header.contains("__metadata__")) {
    EXPECT_EQ(json(layout.metadata), header["__metadata__"]);
  }
  EXPECT_EQ(st.metadata, layout.metadata);
  ASSERT_EQ(st.tensors.size(), layout.entries.size());
  for (size_t i = 0; i < st.tensors.size(); ++i) {
    const SafetensorsEntry& e = layout.entries[i];
    const Tensor& t = st.tensors[i].second;
    EXPECT_EQ(st.tensors[i].first, e.name);
    ASSERT_EQ(t.shape(), e.shape);
    ASSERT_EQ(t.nbytes(), e.end - e.begin);
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(t.data(), bytes.data() + layout.data_begin + e.begin, t.nbytes()), 0);
    }
  }
}

TEST(SafetensorsFuzz, MutatedFilesDecodeConsistentlyOrAreRefused) {
  std::mt19937_64 rng(20261201);
  const std::vector<std::string> bases = valid_files(rng);
  for (const std::string& bytes : bases) ASSERT_NO_THROW(decode_safetensors(bytes, "base"));
  Mutator mutator(rng());
  constexpr int kCases = 4000;
  int accepted = 0, refused = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string bytes = mutator.mutate(bases[i % bases.size()]);
    SCOPED_TRACE(::testing::Message() << "case " << i);
    std::string layout_error;
    SafetensorsLayout layout;
    try {
      layout = read_safetensors_layout(bytes, "fuzz");
    } catch (const Error& e) {
      layout_error = e.what();
      EXPECT_EQ(e.context().file, "fuzz") << layout_error;
      EXPECT_EQ(layout_error.find('\n'), std::string::npos) << layout_error;
    } catch (const std::exception& e) {
      FAIL() << "not a k3::Error: " << e.what();
    }
    try {
      Safetensors st = decode_safetensors(bytes, "fuzz");
      ASSERT_EQ(layout_error, "") << "decoded a file whose layout was refused";
      recheck(bytes, layout, st);
      if (::testing::Test::HasFatalFailure()) return;
      ++accepted;
    } catch (const Error& e) {
      ASSERT_EQ(e.what(), layout_error) << "decoding refused what the layout accepted";
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "not a k3::Error: " << e.what();
    }
  }
  std::cout << accepted << " mutated files decoded, " << refused << " refused\n";
  // Both outcomes must be common, or the mutations test little.
  EXPECT_GT(accepted, kCases / 20);
  EXPECT_GT(refused, kCases / 2);
}

// TensorFile reads the header from the file as the in-memory reader does: mutated files written
// to disk are refused with the same message, or read tensor by tensor to the bytes decoding gives.
TEST(SafetensorsFuzz, TensorFileAgreesWithDecoding) {
  testing::TempDir dir("k3_st_fuzz");
  std::mt19937_64 rng(20261202);
  const std::vector<std::string> bases = valid_files(rng);
  Mutator mutator(rng());
  int accepted = 0;
  for (int i = 0; i < 500; ++i) {
    const std::string bytes = mutator.mutate(bases[i % bases.size()]);
    SCOPED_TRACE(::testing::Message() << "case " << i);
    const std::string path = dir.file("mutated.safetensors", bytes);
    Safetensors st;
    const std::string decode_error =
        testing::error_of([&] { st = decode_safetensors(bytes, path); });
    try {
      const TensorFile file{FileReader(path)};
      ASSERT_EQ(decode_error, "") << "opened a file decoding refuses";
      ASSERT_EQ(file.entries().size(), st.tensors.size());
      for (size_t k = 0; k < st.tensors.size(); ++k) {
        const SafetensorsEntry& e = file.entries()[k];
        const Tensor& t = st.tensors[k].second;
        ASSERT_EQ(e.name, st.tensors[k].first);
        const Tensor read = file.tensor(e);
        ASSERT_EQ(read.shape(), t.shape());
        if (t.nbytes()) {
          EXPECT_EQ(std::memcmp(read.data(), t.data(), t.nbytes()), 0) << e.name;
        }
      }
      ++accepted;
    } catch (const Error& e) {
      ASSERT_EQ(e.what(), decode_error);
    }
  }
  EXPECT_GT(accepted, 500 / 20);
}

}  // namespace
}  // namespace k3
