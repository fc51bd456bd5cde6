#include "k3/data/tokenizer.h"

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/data/byte_tokenizer.h"
#include "k3/data/tokenizer/bpe_tokenizer.h"

namespace k3::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (file_exists(name + "/" + kRankFileName)) return std::make_unique<BpeTokenizer>(name);
  throw Error("unknown tokenizer '" + name + "': neither \"byte\" nor a directory holding " +
                  kRankFileName + " and " + kTokenizerConfigName,
              ErrorContext{"", "tokenizer", -1});
}

}  // namespace k3::data
