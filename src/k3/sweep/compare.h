// Arms of a sweep compared the fair way (docs/scaling.md): each arm's best learning rate (and
// batch size) per size and budget, one scaling law fitted per arm to those optima, and the
// compute multiplier between arms at equal loss, with bootstrap intervals.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/scaling/fit.h"
#include "k3/sweep/jobs.h"
#include "k3/sweep/results.h"

namespace k3::sweep {

// One arm's best run at one (size, budget): the lowest loss over learning rates and batch sizes,
// each averaged over seeds.
struct Optimum {
  double target = 0, budget = 0;
  double params = 0, tokens = 0, compute = 0;  // C = 6 N D
  double lr = 0;
  int64_t batch_size = 0;
  double loss = 0;
  bool lr_at_edge = false;  // the best lr is the smallest or largest tried: widen the grid
  int64_t tried = 0;        // (lr, batch) points that finished
};

struct ArmFit {
  std::string arm;
  std::vector<Optimum> optima;
  scaling::LawForm form = scaling::LawForm::kCompute;
  scaling::FitResult fit;
  scaling::ScalingLaw law;
  std::array<scaling::Interval, scaling::kParamCount> intervals;
  std::vector<scaling::ScalingLaw> resampled;  // one law per bootstrap resample
};

struct Multiplier {
  std::string arm;             // compared with the first arm
  double value = NAN;          // C_arm(loss) / C_first(loss): above 1, the arm needs more
  scaling::Interval interval;  // central 95% over the bootstrap resamples
  int64_t unreachable = 0;     // resamples in which an arm never reaches the loss
};

// A loss the arms are compared at: the first arm's fitted loss at the compute of one of its
// optima (so within the range the sweep measured).
struct Reference {
  double compute = NAN, loss = NAN;
  std::vector<Multiplier> multipliers;  // one per other arm
};

struct Comparison {
  std::string loss_column;  // val_loss, val_loss_smoothed or an ood_ column
  std::vector<ArmFit> arms;
  std::vector<Reference> references;  // at each of the first arm's optima, smallest first
  int resamples = 0;
};

// Needs, per arm, at least as many optima as its law has free variables plus one. The form is
// L(C) when the arm's runs all have one tokens-per-parameter ratio (N and D then move together),
// else L(N, D), compared along its compute-optimal frontier.
Comparison compare_arms(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                        const std::string& loss_column, int resamples, uint64_t seed);

// The compute at which a law (along its compute-optimal frontier for form nd) reaches LOSS;
// infinite when it never does (LOSS at or below its E).
double compute_for_loss(const scaling::ScalingLaw& law, double loss);
double frontier_loss(const scaling::ScalingLaw& law, double compute);

std::string describe(const Comparison& c, double entropy_floor);
// The same as one JSON object: per arm its optima, law and intervals; the multipliers.
std::string comparison_json(const Comparison& c);
// Loss against compute: each arm's optima and its fitted law (along its frontier).
std::string render_comparison_svg(const Comparison& c);
// Loss against the learning rate: one curve per arm, size and budget (failed runs are gaps).
std::string render_lr_svg(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                          const std::string& column);

}  // namespace k3::sweep
