#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"

namespace k3::data {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(ByteTokenizer, SpecialTokens) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 258);
  EXPECT_EQ(tok.name(), "byte");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{256, 'h', 'i', 257, 258}), "<|bos|>hi<|eos|><|pad|>");
  // Ids a padded model head can produce beyond the vocabulary decode without failing.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{'a', 300, -1}), "a<|300|><|-1|>");
  // Text never becomes a special token.
  EXPECT_EQ(tok.encode("<|eos|>").size(), 7u);
}

TEST(Tokenizer, ByName) {
  EXPECT_EQ(make_tokenizer("byte")->name(), "byte");
  try {
    make_tokenizer("bpe");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "tokenizer");
    EXPECT_NE(std::string(e.what()).find("bpe"), std::string::npos);
  }
}

}  // namespace k3::data
