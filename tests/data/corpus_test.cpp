#include "k3/data/corpus.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"

namespace k3::data {

TEST(Corpus, SameSeedSameText) {
  const Corpus a(11), b(11), c(12);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.document(i), b.document(i));
  EXPECT_NE(a.document(0) + a.document(1), c.document(0) + c.document(1));
  EXPECT_NE(a.document(0), a.document(1));
}

TEST(Corpus, DocumentsAreIndependentOfEachOther) {
  const Corpus corpus(5);
  const std::string alone = corpus.document(7);
  for (int i = 0; i < 7; ++i) corpus.document(i);
  EXPECT_EQ(corpus.document(7), alone);
  EXPECT_EQ(Corpus(5).document(7), alone);
}

TEST(Corpus, LooksLikeSentences) {
  const std::string doc = Corpus(1).document(0);
  ASSERT_FALSE(doc.empty());
  EXPECT_TRUE(std::isupper(static_cast<unsigned char>(doc[0])));
  const char last = doc.back();
  EXPECT_TRUE(last == '.' || last == '?' || last == '!');
  EXPECT_EQ(doc.find("  "), std::string::npos);
}

// The derivation must be recoverable from the text: that is what makes the entropy exact.
TEST(Corpus, TextDeterminesTheDerivation) {
  const Corpus corpus(3);
  for (int i = 0; i < 2000; ++i) {
    const Derivation generated = corpus.derivation(i);
    const Derivation parsed = corpus.parse(corpus.document(i));
    ASSERT_EQ(parsed.rules, generated.rules) << "document " << i;
    ASSERT_EQ(parsed.terminals, generated.terminals) << "document " << i;
  }
}

TEST(Corpus, ParseRejectsOtherText) {
  const Corpus corpus(3);
  const std::string doc = corpus.document(0);
  EXPECT_THROW(corpus.parse(doc + " "), Error);
  EXPECT_THROW(corpus.parse(" " + doc), Error);
  std::string lower = doc;
  lower[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(lower[0])));
  EXPECT_THROW(corpus.parse(lower), Error);
  EXPECT_THROW(corpus.parse("The zebra slept."), Error);
  EXPECT_THROW(corpus.parse("The miller slept"), Error);
  EXPECT_NO_THROW(corpus.parse("The miller slept."));
}

TEST(Corpus, LengthIsTheSumOfChargedBytes) {
  const Corpus corpus(9);
  for (int i = 0; i < 200; ++i) {
    const Derivation d = corpus.derivation(i);
    int64_t charged = -1;
    for (int t : d.terminals) charged += corpus.text_form().charged_bytes(t);
    EXPECT_EQ(static_cast<int64_t>(corpus.document(i).size()), charged);
  }
}

TEST(Corpus, TextAndTokenStreams) {
  const Corpus corpus(2);
  const std::string first = corpus.document(0), second = corpus.document(1);
  const std::string text = corpus.text(100000);
  EXPECT_EQ(text.size(), 100000u);
  EXPECT_EQ(text.substr(0, first.size() + 2 + second.size() + 2), first + "\n\n" + second + "\n\n");

  ByteTokenizer tok;
  const std::vector<int32_t> tokens = corpus.tokens(100000, tok);
  ASSERT_EQ(tokens.size(), 100000u);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + first.size())), first);
  EXPECT_EQ(tokens[first.size()], tok.eos_id());
  EXPECT_EQ(corpus.tokens(0, tok).size(), 0u);
}

}  // namespace k3::data
