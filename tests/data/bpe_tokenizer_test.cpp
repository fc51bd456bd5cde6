// BpeTokenizer: ids worked out by hand on a small rank file, round trips of any bytes, special
// tokens, fingerprints, and malformed tokenizer files refused in one line.
#include "k3/data/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/data/tokenizer.h"
#include "k3/data/tokenizer/bpe_stream.h"
#include "k3/data/tokenizer/bpe_train.h"

namespace k3::data {
namespace {

using Ids = std::vector<int32_t>;

// Byte b has the rank 255 - b (so that a byte's id is not its value), listed in byte order, one a
// line: byte b is on line b + 1. Then the merges.
std::string byte_lines() {
  std::string lines;
  for (int b = 0; b < 256; ++b) {
    lines +=
        base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(255 - b) + "\n";
  }
  return lines;
}
int32_t id_of(char c) { return 255 - static_cast<unsigned char>(c); }

// "bc" 256, "ab" 257, "abc" 258, "aa" 259.
const char* const kMerges = "YmM= 256\nYWI= 257\nYWJj 258\nYWE= 259\n";
const char* const kConfig = R"({
  "added_tokens_decoder": {
    "260": {"content": "[BOS]", "special": true},
    "261": {"content": "[EOS]", "special": true},
    "263": {"content": "[PAD]", "special": true},
    "264": {"content": "[EOS]!", "special": true}
  },
  "bos_token": "[BOS]",
  "eos_token": {"content": "[EOS]"},
  "pad_token": "[PAD]",
  "model_max_length": 1000000000000000019884624838656,
  "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", null]}
})";

std::string write_dir(const testing::TempDir& dir, const std::string& ranks,
                      const std::string& config = kConfig) {
  dir.file("tiktoken.model", ranks);
  dir.file("tokenizer_config.json", config);
  return dir.path();
}

// A tokenizer learned from text with multi-byte characters, for round trips: training stops
// early, at 409 tokens, once every piece of the sample is a token.
BpeTokenizer learned_tokenizer() {
  const Pretokenizer pre{std::string(kimi_pattern())};
  PieceCounts counts(pre);
  std::string sample;
  for (int k = 0; k < 20; ++k) {
    sample += "The quick brown fox jumps over the lazy dog's back, 12345 times. ";
    sample += "中文的文本和日本語のテキスト、混ざっている。 Ünïcödé façade naïve café\u0301 ";
    sample += "👍🏽 👨‍👩‍👧 emoji!!   \n\n\t  indented\r\n";
  }
  counts.add_text(sample);
  BpeFiles files;
  files.tokens = learn_bpe(counts, 700).tokens;
  files.specials = {"[BOS]", "[EOS]", "[PAD]"};
  files.bos_id = static_cast<int32_t>(files.tokens.size());
  files.eos_id = files.bos_id + 1;
  files.pad_id = files.bos_id + 2;
  files.pattern = std::string(kimi_pattern());
  return BpeTokenizer(files, "learned");
}

}  // namespace

// Each piece starts from its bytes and merges the lowest-ranked adjacent pair, leftmost first.
TEST(BpeTokenizer, EncodesAHandWrittenRankFileAsWorkedOut) {
  const testing::TempDir dir("bpe_hand");
  const BpeTokenizer tok(write_dir(dir, byte_lines() + kMerges));
  EXPECT_EQ(tok.num_base_tokens(), 260);
  EXPECT_EQ(tok.vocab_size(), 265);
  // "abcd": bc (256) before ab (257), then a+bc = abc (258); d alone.
  EXPECT_EQ(tok.encode("abcd"), (Ids{258, id_of('d')}));
  // " abc": " a" is no token, so the space stays alone; bc, then abc.
  EXPECT_EQ(tok.encode(" abc"), (Ids{id_of(' '), 258}));
  // " aaaaa": aa at the leftmost position first, then the next free pair of a's.
  EXPECT_EQ(tok.encode(" aaaaa"), (Ids{id_of(' '), 259, 259, id_of('a')}));
  // "cab": ab; "cab" is no token.
  EXPECT_EQ(tok.encode(" cab"), (Ids{id_of(' '), id_of('c'), 257}));
  // A whole piece that is a token is taken as it is; pieces never merge across each other.
  EXPECT_EQ(tok.encode("abc ab"), (Ids{258, id_of(' '), 257}));
  EXPECT_EQ(tok.decode(tok.encode("abcd abc aaaaa cab")), "abcd abc aaaaa cab");
}

// Merged pieces are cached per thread: a repeated piece, and another table's ids for the same
// piece on the same thread, come out as merged afresh.
TEST(BpeTokenizer, CachedMergesAreThoseOfTheirOwnTable) {
  const testing::TempDir a("bpe_cache_a"), b("bpe_cache_b");
  const BpeTokenizer first(write_dir(a, byte_lines() + kMerges));
  // "ab" and "bc" swap ranks. "bcab": the first merges bc (256), then ab (257); the second ab
  // (256), then bc (257).
  const BpeTokenizer second(
      write_dir(b, byte_lines() + "YWI= 256\nYmM= 257\nYWJj 258\nYWE= 259\n"));
  EXPECT_EQ(first.encode("bcab bcab"), (Ids{256, 257, id_of(' '), 256, 257}));
  EXPECT_EQ(second.encode("bcab"), (Ids{257, 256}));
  EXPECT_EQ(first.encode("bcab"), (Ids{256, 257}));
  EXPECT_EQ(second.encode("bcab bcab"), (Ids{257, 256, id_of(' '), 257, 256}));
}

// tiktoken's ids for a text with U+180E (MONGOLIAN VOWEL SEPARATOR, not whitespace to tiktoken's
// regex) under the cl100k pattern, on a table where byte b has rank b and "'s" is 256: the pieces
// are "\u180e'" and "s", so "'s" is never merged.
TEST(BpeTokenizer, MongolianVowelSeparatorSplitsAsTiktoken) {
  BpeFiles files;
  for (int b = 0; b < 256; ++b) files.tokens.emplace_back(1, static_cast<char>(b));
  files.tokens.emplace_back("'s");
  files.pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
      R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
  const BpeTokenizer tok(files, "cl100k pattern");
  EXPECT_EQ(tok.encode("\u180e's"), (Ids{225, 160, 142, 39, 115}));
  EXPECT_EQ(tok.encode("it's"), (Ids{105, 116, 256}));  // where "'s" is a piece, it is merged
}

TEST(BpeTokenizer, SpecialTokens) {
  const testing::TempDir dir("bpe_special");
  const BpeTokenizer tok(write_dir(dir, byte_lines() + kMerges));
  EXPECT_EQ(tok.bos_id(), 260);
  EXPECT_EQ(tok.eos_id(), 261);
  EXPECT_EQ(tok.pad_id(), 263);
  // The id the config leaves out is Kimi's reserved token.
  EXPECT_EQ(tok.special(262), "<|reserved_token_262|>");
  // The leftmost special token, the longest of those starting there ("[EOS]!" over "[EOS]").
  EXPECT_EQ(tok.encode_with_specials("[BOS]abc<|reserved_token_262|>[EOS]![EOS]x"),
            (Ids{260, 258, 262, 264, 261, id_of('x')}));
  // encode never produces them.
  const Ids plain = tok.encode("[BOS]abc[EOS]");
  for (int32_t id : plain) EXPECT_LT(id, tok.num_base_tokens());
  EXPECT_EQ(tok.decode(plain), "[BOS]abc[EOS]");
  EXPECT_EQ(tok.decode(Ids{260, 258, 262, 265, -1}), "[BOS]abc<|reserved_token_262|><|265|><|-1|>");
}

TEST(BpeTokenizer, RoundTripsAnyBytes) {
  const BpeTokenizer tok = learned_tokenizer();
  ASSERT_EQ(tok.num_base_tokens(), 409);
  const std::vector<std::string> cases = {
      "",
      "plain English text, with punctuation!",
      "\xC0\xAF overlong \xE0\x80\xAF",
      "surrogate \xED\xA0\x80 and above \xF4\x90\x80\x80 and \xF5\xFF\xFE",
      "truncated \xE4\xB8 in the middle and at the end \xF0\x9F\x91",
      "\x80\x81 stray continuations \xBF",
      "combining e\u0301\u0308 marks a\u0300\u0301\u0302",
      "中文、日本語のテキスト。한국어",
      "👍🏽 👨‍👩‍👧 🏳️‍🌈",
      std::string(5000, ' ') + "x" + std::string(3000, '\n') + std::string(100, '\t'),
      std::string("nul \0 bytes \0\0", 14),
  };
  for (const std::string& text : cases) EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 300, '\0');
    for (char& c : text) c = static_cast<char>(rng());
    ASSERT_EQ(tok.decode(tok.encode(text)), text);
  }
  // Common words of the training text are single tokens.
  EXPECT_EQ(tok.encode(" quick").size(), 1u);
}

TEST(BpeTokenizer, FingerprintCoversRanksSpecialsAndPattern) {
  const testing::TempDir a("bpe_fp_a"), b("bpe_fp_b"), c("bpe_fp_c"), d("bpe_fp_d");
  const std::string base = BpeTokenizer(write_dir(a, byte_lines() + kMerges)).fingerprint();
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(BpeTokenizer(write_dir(b, byte_lines() + kMerges)).fingerprint(), base);
  // Two ranks swapped.
  EXPECT_NE(BpeTokenizer(write_dir(c, byte_lines() + "YWI= 256\nYmM= 257\nYWJj 258\nYWE= 259\n"))
                .fingerprint(),
            base);
  std::string config = kConfig;
  config.replace(config.find("\"[PAD]\", \"special\""), 7, "\"[PAD2]\"");
  config.replace(config.rfind("\"[PAD]\""), 7, "\"[PAD2]\"");
  EXPECT_NE(BpeTokenizer(write_dir(d, byte_lines() + kMerges, config)).fingerprint(), base);
  config = kConfig;
  config.insert(1, "\"pat_str\": \"\\\\S+|\\\\s+\",");
  EXPECT_NE(BpeTokenizer(write_dir(d, byte_lines() + kMerges, config)).fingerprint(), base);
}

TEST(BpeTokenizer, MakeTokenizerTakesADirectory) {
  const testing::TempDir dir("bpe_make");
  write_dir(dir, byte_lines() + kMerges);
  const auto tok = make_tokenizer(dir.path());
  EXPECT_EQ(tok->name(), dir.path());
  EXPECT_EQ(tok->vocab_size(), 265);
  const std::string error = testing::error_of([] { make_tokenizer("/nonexistent/tok"); });
  EXPECT_NE(error.find("field tokenizer: unknown tokenizer '/nonexistent/tok': neither \"byte\""),
            std::string::npos)
      << error;
}

TEST(BpeTokenizer, RefusesMalformedRankFiles) {
  const testing::TempDir dir("bpe_bad_ranks");
  const std::string file = dir.path() + "/tiktoken.model";
  auto error = [&](const std::string& ranks) {
    write_dir(dir, ranks);
    const std::string e = testing::error_of([&] { BpeTokenizer tok(dir.path()); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("file " + file + ": ", 0), 0u) << e;
    return e;
  };
  auto says = [](const std::string& e, const std::string& what) {
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  says(error(byte_lines() + "Y$== 256\n"), "line 257: invalid base64 'Y$=='");
  says(error(byte_lines() + "YmM=\n"), "line 257: expected '<base64 of the token> <rank>'");
  says(error(byte_lines() + "YmM= 256 7\n"), "line 257: expected");
  says(error(byte_lines() + "YmM= x1\n"), "line 257: rank 'x1' is not a non-negative integer");
  says(error(byte_lines() + "YmM= -1\n"), "line 257: rank '-1' is not a non-negative integer");
  says(error(byte_lines() + "YQ== 256\n"), "line 257: duplicate token (also on line 98)");
  says(error(byte_lines() + "YmM= 5\n"), "line 257: duplicate rank 5 (also on line 251)");
  says(error(byte_lines() + "YmM= 300\n"),
       "line 257: rank 300 is out of range: 257 tokens must have the ranks 0..256");
  says(error(byte_lines() + " 256\n"), "line 257: empty token");
  std::string no_a = byte_lines();
  no_a.replace(no_a.find("QQ== 190"), 8, "YWI= 190");  // 'A' replaced by "ab"
  says(error(no_a), "byte 0x41 is no token");
}

TEST(BpeTokenizer, RefusesMalformedConfigs) {
  const testing::TempDir dir("bpe_bad_config");
  const std::string file = dir.path() + "/tokenizer_config.json";
  auto error = [&](const std::string& config) {
    write_dir(dir, byte_lines() + kMerges, config);
    const std::string e = testing::error_of([&] { BpeTokenizer tok(dir.path()); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("file " + file, 0), 0u) << e;
    return e;
  };
  auto says = [](const std::string& e, const std::string& what) {
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  says(error("{\n  \"bos_token\": \"[BOS]\",\n  oops\n}"), ": line 3: invalid JSON");
  says(error("[1, 2]"), "expected a JSON object");
  says(error(R"({"bos_token": "[BOS]"})"), "field added_tokens_decoder: missing or not an object");
  const std::string decoder = R"("added_tokens_decoder": {"260": {"content": "[BOS]"},
      "261": {"content": "[EOS]"}, "262": {"content": "[PAD]"}})";
  says(error("{" + decoder + R"(, "eos_token": "[EOS]", "pad_token": "[PAD]"})"),
       "field bos_token: missing");
  says(
      error("{" + decoder + R"(, "bos_token": "[X]", "eos_token": "[EOS]", "pad_token": "[PAD]"})"),
      "field bos_token: '[X]' is not among the added_tokens_decoder tokens");
  says(error(R"({"added_tokens_decoder": {"100": {"content": "[BOS]"}}})"),
       "field added_tokens_decoder: id 100 is not a special id");
  says(error(R"({"added_tokens_decoder": {"26x": {"content": "[BOS]"}}})"),
       "key '26x' is not an id");
  says(error(R"({"added_tokens_decoder": {"260": {"content": "[A]"}, "261": {"content": "[A]"}}})"),
       "'[A]' is given to ids 260 and 261");
  says(error(R"({"added_tokens_decoder": {"260": {"content": 5}}})"),
       "id 260: expected {\"content\": \"<non-empty text>\", ...}");
  says(error("{" + decoder + R"(, "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]",
       "pat_str": "(ab"})"),
       "field pat_str: the pattern does not compile at offset 3");
}

// Fed in chunks of any size, the stream gives exactly the ids of the whole text: pieces a later
// byte could change (a whitespace run before a newline, a word, a cut-off character) wait.
TEST(BpeStreamEncoder, RandomChunkingsEqualTheWholeText) {
  const BpeTokenizer tok = learned_tokenizer();
  const std::vector<std::string> snippets = {"The quick brown fox",
                                             " jumps",
                                             "  ",
                                             "\n",
                                             " \n \n",
                                             "\r\n",
                                             "\t",
                                             "12345",
                                             "don't",
                                             "'ll",
                                             "中文",
                                             "、",
                                             "テキスト",
                                             "e\u0301",
                                             "👍🏽",
                                             "!!",
                                             "...",
                                             "\xFF",
                                             "\xE4\xB8",
                                             "\xC0",
                                             "\x80",
                                             "NASA",
                                             "'S",
                                             " x",
                                             "a",
                                             "   ",
                                             "\n\n\n"};
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 80);
    for (int k = 0; k < n; ++k) text += snippets[rng() % snippets.size()];
    const Ids whole = tok.encode(text);
    BpeStreamEncoder stream(tok);
    Ids ids;
    for (size_t at = 0; at < text.size();) {
      const size_t len =
          std::min<size_t>(text.size() - at, rng() % 3 == 0 ? rng() % 64 : rng() % 4);
      stream.feed(std::string_view(text).substr(at, len), ids);
      at += len;
    }
    stream.finish(ids);
    ASSERT_EQ(ids, whole) << "text: " << text;
  }
  // One long run fed a byte at a time.
  const std::string run = std::string(20000, ' ') + "word" + std::string(20000, 'a');
  BpeStreamEncoder stream(tok);
  Ids ids;
  for (char c : run) stream.feed(std::string_view(&c, 1), ids);
  stream.finish(ids);
  EXPECT_EQ(ids, tok.encode(run));
}

}  // namespace k3::data
