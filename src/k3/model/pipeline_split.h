// How pipeline parallelism cuts the decoder: pp ranks × vp chunks = pp·vp virtual stages, each a
// range of consecutive layers; rank r's chunk c is virtual stage c·pp + r. The embedding goes with
// stage 0 and the head (output mixing, final norm, LM head, loss) with the last. The layer counts
// per stage are explicit (parallel.pp_layers in a run config); without them the layers split
// evenly, and a count that does not divide is refused rather than balanced silently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::model {

struct Stage;

struct PipelineSplit {
  int pp = 1, vp = 1;
  std::vector<int64_t> layers;  // per virtual stage

  // `counts` empty: num_layers / (pp·vp) each. Refuses, in one line naming parallel.pp_layers,
  // counts that are not pp·vp positive numbers adding up to num_layers.
  static PipelineSplit make(int64_t num_layers, int pp = 1, int vp = 1,
                            std::vector<int64_t> counts = {});

  int stages() const { return pp * vp; }
  int rank_of(int stage) const { return stage % pp; }
  int chunk_of(int stage) const { return stage / pp; }
  int64_t first_layer(int stage) const;
  Stage stage(int index) const;
  int stage_of_layer(int64_t layer) const;
  // "4 stages over pp 2 × vp 2: layers [0, 2) [2, 4) [4, 6) [6, 8)"
  std::string describe() const;
};

}  // namespace k3::model
