// The multimodal model learns to read its images: k3-nano-vision trained on the built-in
// image-text corpus predicts held-out captions better from their own images than from another
// row's. The captions (counts, colours, shapes, places) can be told only from the pixels, so the
// gap measures what the vision tower passes to the language model.
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/trainee.h"

namespace k3::parallel {
namespace {

using testing::ImageTextBatch;
using testing::Trainee;

TEST(VisionTraining, CaptionsAreReadFromTheImages) {
  const model::ModelConfig c =
      model::load_model_config(k3::testing::source_dir() + "/configs/k3-nano-vision.json");
  Trainee t(dist::single_process(), {0, "adamw"}, c);
  const int64_t T = 64, rows = 8;
  const int steps = 300;
  for (int step = 0; step < steps; ++step) {
    const ImageTextBatch b(c, step, T, rows, 1);
    t.dp.forward_backward(t.arena, t.acts, b.share(0, rows));
    t.dp.apply(3e-3f, 1.0f);
  }
  // Held out: samples past every training one. Shuffled: each row sees the next row's image.
  const ImageTextBatch held(c, 1000, T, rows, 1);
  model::TokenBatch own = held.share(0, rows)[0];
  std::vector<float> rolled(held.micro_batches[0].images.size());
  const size_t per = rolled.size() / rows;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r)
    std::copy_n(own.images + ((r + 1) % rows) * per, per, rolled.begin() + r * per);
  model::TokenBatch other = own;
  other.images = rolled.data();
  const kernels::LossSum seen = t.model.forward_loss(t.arena, own),
                         swapped = t.model.forward_loss(t.arena, other);
  const double a = seen.sum / seen.count, b = swapped.sum / swapped.count;
  std::printf("caption loss after %d steps: %.4f with its own image, %.4f with another's\n", steps,
              a, b);
  EXPECT_LT(a, b - 0.05);
}

}  // namespace
}  // namespace k3::parallel
