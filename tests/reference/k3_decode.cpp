// Driver for k3_decode.py: builds the model of a config from a seed, moves its parameters off their
// identity values (driver.h, move_off_identity) and writes
//   WEIGHTS  its weights (K3 names), which the PyTorch side loads;
//   RESULTS  logits [B, pieces, V]: the tokens [B, T] of BATCH fed to the decoder piece by piece,
//            PIECES their lengths (comma-separated, summing to T), and the logits of each piece's
//            last token. A one-token piece goes through one batched decode step of all B sequences
//            (generation's step); a longer one through each sequence's own decode (a prefill on an
//            empty cache, else a continuation of it).
// BATCH holds tokens and targets [B, T] as float32 (the targets are not read).
#include <sstream>
#include <string>
#include <vector>

#include "driver.h"

namespace {

std::vector<int64_t> parse_pieces(const std::string& text, int64_t T) {
  std::vector<int64_t> pieces;
  std::istringstream in(text);
  int64_t total = 0;
  for (std::string item; std::getline(in, item, ',');) {
    pieces.push_back(std::stoll(item));
    K3_CHECK(pieces.back() > 0, "PIECES: expected positive lengths, got ", text);
    total += pieces.back();
  }
  K3_CHECK(total == T, "PIECES: the lengths ", text, " sum to ", total, ", the batch has T = ", T);
  return pieces;
}

void run(const std::vector<std::string>& args) {
  const std::string &config_path = args[0], &batch_path = args[2];
  const uint64_t seed = std::stoull(args[1]);
  k3::model::Model model(k3::model::load_model_config(config_path));
  model.initialize(seed);
  k3::reference::move_off_identity(model.params(), seed, config_path);
  k3::reference::save_weights(model.params(), args[3]);

  const k3::reference::Batch b = k3::reference::load_batch(batch_path);
  const int64_t B = b.view.B, T = b.view.T, V = model.config().vocab_size;
  const std::vector<int64_t> pieces = parse_pieces(args[5], T);
  const int64_t n = static_cast<int64_t>(pieces.size());
  std::vector<k3::model::ModelCache> caches;
  std::vector<k3::model::ModelCache*> all;
  for (int64_t s = 0; s < B; ++s) caches.push_back(model.make_cache(T));
  for (k3::model::ModelCache& c : caches) all.push_back(&c);

  k3::Tensor logits = k3::Tensor::empty({B, n, V});
  k3::Arena arena(size_t{1} << 30, false);
  std::vector<int32_t> column(static_cast<size_t>(B));
  std::vector<float> rows(static_cast<size_t>(B * V));
  int64_t at = 0;  // the piece's first position
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = pieces[static_cast<size_t>(i)];
    if (len == 1) {
      for (int64_t s = 0; s < B; ++s) column[static_cast<size_t>(s)] = b.tokens[s * T + at];
      model.decode_batch(arena, all, column.data(), rows.data());
      for (int64_t s = 0; s < B; ++s)
        std::copy_n(rows.data() + s * V, V, logits.f32() + (s * n + i) * V);
    } else {
      for (int64_t s = 0; s < B; ++s)
        model.decode(arena, caches[static_cast<size_t>(s)], b.tokens.data() + s * T + at, len,
                     logits.f32() + (s * n + i) * V);
    }
    at += len;
  }
  k3::Safetensors out;
  out.tensors.emplace_back("logits", logits);
  k3::save_safetensors(args[4], out);
}

}  // namespace

int main(int argc, char** argv) {
  return k3::reference::driver_main(argc, argv, 6,
                                    "CONFIG SEED BATCH WEIGHTS_OUT RESULTS_OUT PIECES", run);
}
