#include "k3/model/pipeline_split.h"

#include <numeric>

#include "k3/base/error.h"
#include "k3/model/model.h"

namespace k3::model {

PipelineSplit PipelineSplit::make(int64_t num_layers, int pp, int vp, std::vector<int64_t> counts) {
  K3_CHECK(pp >= 1 && vp >= 1, "parallel.pp and parallel.vp must be at least 1 (got ", pp, ", ", vp,
           ")");
  const int stages = pp * vp;
  if (counts.empty()) {
    K3_CHECK(num_layers % stages == 0, "parallel.pp_layers: ", num_layers,
             " layers do not split evenly over pp·vp = ", stages,
             " virtual stages; give each stage's layer count (", stages, " numbers adding up to ",
             num_layers, ")");
    counts.assign(static_cast<size_t>(stages), num_layers / stages);
  }
  K3_CHECK(static_cast<int>(counts.size()) == stages, "parallel.pp_layers: ", counts.size(),
           " counts for pp·vp = ", stages, " virtual stages");
  for (int64_t c : counts)
    K3_CHECK(c >= 1, "parallel.pp_layers: every virtual stage needs at least one layer (got ", c,
             ")");
  const int64_t sum = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  K3_CHECK(sum == num_layers, "parallel.pp_layers: the counts add up to ", sum,
           " layers, the model has ", num_layers);
  return {pp, vp, std::move(counts)};
}

int64_t PipelineSplit::first_layer(int stage) const {
  return std::accumulate(layers.begin(), layers.begin() + stage, int64_t{0});
}

Stage PipelineSplit::stage(int index) const {
  const int64_t first = first_layer(index);
  return {first, first + layers[static_cast<size_t>(index)], index == 0, index == stages() - 1};
}

int PipelineSplit::stage_of_layer(int64_t layer) const {
  int64_t end = 0;
  for (int s = 0; s < stages(); ++s)
    if (layer < (end += layers[static_cast<size_t>(s)])) return s;
  K3_CHECK(false, "layer ", layer, " lies beyond the pipeline's ", end, " layers");
  return -1;
}

std::string PipelineSplit::describe() const {
  std::string d = std::to_string(stages()) + " stages over pp " + std::to_string(pp);
  if (vp > 1) d += " × vp " + std::to_string(vp);
  d += ": layers";
  for (int s = 0; s < stages(); ++s) {
    const Stage st = stage(s);
    d += " [" + std::to_string(st.first) + ", " + std::to_string(st.end) + ")";
  }
  return d;
}

}  // namespace k3::model
