#include "k3/model/layers/mixer.h"

#include "k3/base/error.h"

namespace k3::model {
namespace {

[[noreturn]] void refuse_documents() {
  throw Error(
      "packed documents are taken by KDA and gated MLA layers only; this model has a gated "
      "attention layer",
      ErrorContext{"", "data.documents", -1});
}

}  // namespace

void Mixer::forward(const Step&, const float*, int64_t, std::span<const int64_t>, float*) const {
  refuse_documents();
}

void Mixer::backward(const Step&, const float*, int64_t, std::span<const int64_t>, float*) const {
  refuse_documents();
}

}  // namespace k3::model
