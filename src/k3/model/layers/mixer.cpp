#include "k3/model/layers/mixer.h"

#include "k3/base/error.h"

namespace k3::model {

void Mixer::forward(const Step&, const float*, int64_t, std::span<const int64_t>, float*) const {
  throw Error(
      "packed documents are taken by KDA and gated MLA layers only; this model has a gated "
      "attention layer",
      ErrorContext{"", "data.documents", -1});
}

void Mixer::backward(const Step& s, const float* dout, int64_t T,
                     std::span<const int64_t> doc_starts, float* dx) const {
  forward(s, dout, T, doc_starts, dx);  // the same refusal
}

}  // namespace k3::model
