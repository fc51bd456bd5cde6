#include "k3/data/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "k3/base/checksum.h"
#include "k3/base/error.h"

namespace k3::data {
namespace {

// The hash of everything the ids depend on, each field length-prefixed so that no two
// vocabularies hash the same bytes.
std::string fingerprint_of(const BpeFiles& files) {
  Sha256 hash;
  auto field = [&](std::string_view bytes) {
    hash.update(std::to_string(bytes.size()) + ":");
    hash.update(bytes);
  };
  field("k3lab bpe tokenizer");
  field(std::to_string(files.tokens.size()));
  for (const std::string& t : files.tokens) field(t);
  field(std::to_string(files.specials.size()));
  for (const std::string& s : files.specials) field(s);
  field(std::to_string(files.bos_id) + " " + std::to_string(files.eos_id) + " " +
        std::to_string(files.pad_id));
  field(files.pattern);
  return hash.hex_digest();
}

// Per thread: encode is const and may run on several threads at once.
RankTable::Scratch& thread_scratch() {
  thread_local RankTable::Scratch scratch;
  return scratch;
}

}  // namespace

// A pattern that does not compile is the config's fault: name it.
BpeTokenizer::BpeTokenizer(const std::string& dir) try : BpeTokenizer(read_bpe_files(dir), dir) {
} catch (const Error& e) {
  throw e.with_file(dir + "/" + kTokenizerConfigName);
}

BpeTokenizer::BpeTokenizer(const BpeFiles& files, std::string name)
    : name_(std::move(name)),
      ranks_(files.tokens),
      pretokenizer_(files.pattern),
      specials_(files.specials),
      bos_id_(files.bos_id),
      eos_id_(files.eos_id),
      pad_id_(files.pad_id) {
  for (int32_t k = 0; k < num_specials(); ++k) {
    special_ids_.emplace(specials_[k], ranks_.size() + k);
    specials_by_first_byte_[static_cast<unsigned char>(specials_[k][0])].push_back(k);
  }
  for (auto& list : specials_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return specials_[a].size() > specials_[b].size();
    });
  }
  // Hash the pattern as compiled: Kimi's tiktoken form and its translation mean the same ids.
  BpeFiles hashed = files;
  hashed.pattern = pretokenizer_.pattern();
  fingerprint_ = fingerprint_of(hashed);
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& ids,
                               RankTable::Scratch& scratch) const {
  std::vector<size_t> ends;
  ends.reserve(text.size() / 4 + 1);
  pretokenizer_.split(text, true, ends);
  size_t begin = 0;
  for (size_t end : ends) {
    ranks_.encode_piece(text.substr(begin, end - begin), ids, scratch);
    begin = end;
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_into(text, ids, thread_scratch());
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> ids;
  RankTable::Scratch& scratch = thread_scratch();
  size_t plain = 0;  // where the text not yet encoded starts
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string* found = nullptr;  // the longest special token starting at i
    for (int32_t k : specials_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, specials_[k].size(), specials_[k]) == 0) {
        found = &specials_[k];
        break;
      }
    }
    if (!found) continue;
    encode_into(text.substr(plain, i - plain), ids, scratch);
    ids.push_back(special_ids_.at(*found));
    i += found->size() - 1;
    plain = i + 1;
  }
  encode_into(text.substr(plain), ids, scratch);
  return ids;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    if (id >= 0 && id < ranks_.size()) {
      text += ranks_.token(id);
    } else if (id >= ranks_.size() && id < vocab_size()) {
      text += special(id);
    } else {
      text += "<|" + std::to_string(id) + "|>";
    }
  }
  return text;
}

}  // namespace k3::data
