#include "k3/data/tokenizer.h"

#include "k3/base/error.h"
#include "k3/data/byte_tokenizer.h"

namespace k3::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  throw Error("unknown tokenizer '" + name + "', expected one of: byte",
              ErrorContext{"", "tokenizer", -1});
}

}  // namespace k3::data
