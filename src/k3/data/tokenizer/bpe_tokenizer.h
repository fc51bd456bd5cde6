// Byte-level BPE in tiktoken's way (docs/data.md, Tokenizer): a directory holding tiktoken.model
// and tokenizer_config.json (tokenizer_files.h), Kimi's own or one train_bpe wrote.
#pragma once

#include <array>
#include <string>
#include <unordered_map>

#include "k3/data/tokenizer.h"
#include "k3/data/tokenizer/pretokenizer.h"
#include "k3/data/tokenizer/rank_table.h"
#include "k3/data/tokenizer/tokenizer_files.h"

namespace k3::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads DIR (errors name the file and line). NAME is what name() says: make_tokenizer gives the
  // directory as it was named.
  explicit BpeTokenizer(const std::string& dir);
  BpeTokenizer(const BpeFiles& files, std::string name);

  std::string name() const override { return name_; }
  int32_t vocab_size() const override { return ranks_.size() + num_specials(); }
  std::vector<int32_t> encode(std::string_view text) const override;
  // Specials are rendered as their content, ids outside the vocabulary as <|ID|>.
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  std::string fingerprint() const override { return fingerprint_; }

  // encode, except that the special tokens' contents in TEXT become their ids (as Kimi's encode
  // does for chat templates and media placeholders): at each point the leftmost occurrence, the
  // longest where several start there; the text between them is encoded as encode does.
  std::vector<int32_t> encode_with_specials(std::string_view text) const;

  int32_t num_base_tokens() const { return ranks_.size(); }
  int32_t num_specials() const { return static_cast<int32_t>(specials_.size()); }
  const std::string& special(int32_t id) const { return specials_.at(id - ranks_.size()); }
  const Pretokenizer& pretokenizer() const { return pretokenizer_; }
  const RankTable& ranks() const { return ranks_; }

 private:
  void encode_into(std::string_view text, std::vector<int32_t>& ids,
                   RankTable::Scratch& scratch) const;

  std::string name_;
  RankTable ranks_;
  Pretokenizer pretokenizer_;
  std::vector<std::string> specials_;
  std::unordered_map<std::string, int32_t> special_ids_;
  std::array<std::vector<int32_t>, 256> specials_by_first_byte_;  // longest first
  int32_t bos_id_, eos_id_, pad_id_;
  std::string fingerprint_;
};

}  // namespace k3::data
