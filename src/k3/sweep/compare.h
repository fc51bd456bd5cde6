// Arms of a sweep compared the fair way (docs/scaling.md): each arm's best learning rate (and
// batch size) per size and budget, one scaling law fitted per arm to those optima, and the
// compute multiplier between arms at equal loss, with bootstrap intervals that hold the spread
// between seeds too; an arm with too few sizes for a law (an ablation run at two sizes) is
// compared point by point through the first arm's law.
#pragma once

#include <cstdint>
#include <optional>
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

// The spread of the loss between seeds, measured at the points (arm, size, budget, lr, batch)
// with two or more finished seeds that compete for their size's pick: the best lr by seed mean
// and the next lr on either side of it (a diverging rate far from the optimum is left out).
struct SeedSpread {
  double sd = 0;                         // pooled over those points, n - 1 degrees of freedom each
  int64_t points = 0;                    // 0: no such point, and no seed noise in the intervals
  int64_t min_seeds = 0, max_seeds = 0;  // the seeds those points have
};

struct ArmFit {
  std::string arm;
  std::vector<Optimum> optima;
  scaling::LawForm form = scaling::LawForm::kCompute;
  // Too few sizes for a law of its own (only an arm after the first): no fit, intervals or
  // resampled laws; compared point by point through the first arm's law (Comparison::pointwise).
  bool pointwise = false;
  scaling::FitResult fit;
  scaling::ScalingLaw law;
  std::array<scaling::Interval, scaling::kParamCount> intervals;
  std::vector<scaling::ScalingLaw> resampled;  // one law per bootstrap resample
  // Per bootstrap resample: the optima picked after that resample's seed noise (as many as
  // `optima`, in the same order); the resample's law is fitted to a draw from them.
  std::vector<std::vector<Optimum>> resampled_optima;
};

// A ratio of computes, an arm's over the first arm's, with its bootstrap interval.
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

// The arms without a law of their own at one size and budget. Each one's effective-compute ratio
// at its optimum there: C_arm / C_first(L_arm), the compute it spent (6ND) over the compute the
// first arm's law needs for the same loss; above 1, the arm needs more compute for that loss
// (what it changed was worth that factor). A law that never gets down to L_arm gives 0.
struct PointwiseRow {
  double target = 0, budget = 0;
  std::vector<Optimum> optima;     // one per point-wise arm; loss NAN where it has none here
  std::vector<Multiplier> ratios;  // likewise; value NAN where it has none
  // With two point-wise arms or more, all with an optimum here: their ratios multiplied (per
  // resample for the interval). A product of one-at-a-time ratios, to be set beside the
  // multiplier of an arm that differs in all of them; not a measurement of such an arm.
  std::optional<Multiplier> product;
};

struct Comparison {
  std::string loss_column;  // val_loss, val_loss_smoothed or an ood_ column
  std::vector<ArmFit> arms;
  std::vector<Reference> references;    // at each of the first arm's optima, smallest first
  std::vector<PointwiseRow> pointwise;  // by size, then budget; empty without point-wise arms
  SeedSpread spread;
  int resamples = 0;
};

// The first arm needs at least as many optima as its law has free variables plus one; another
// arm with fewer is compared point by point. The form is L(C) when the arm's runs all have one
// tokens-per-parameter ratio (N and D then move together), else L(N, D), compared along its
// compute-optimal frontier. Each bootstrap resample moves every (lr, batch) point's seed mean by
// Gaussian noise of sd spread.sd / sqrt(its seeds) before each size's best is picked, then draws
// the optima with replacement and refits; the same for every thread count.
Comparison compare_arms(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                        const std::string& loss_column, int resamples, uint64_t seed);

SeedSpread seed_spread(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                       const std::string& loss_column);

// A job's loss in a results column: val_loss, val_loss_smoothed or an ood_ column (NaN when it
// has none); an unknown column is an error naming it.
double loss_of(const JobResult& r, const std::string& column);
// The variables a law of FORM fits: 3 for L(C), 5 for L(N, D).
int free_variables(scaling::LawForm form);

// The compute at which a law (along its compute-optimal frontier for form nd) reaches LOSS;
// infinite when it never does (LOSS at or below its E).
double compute_for_loss(const scaling::ScalingLaw& law, double loss);
double frontier_loss(const scaling::ScalingLaw& law, double compute);

std::string describe(const Comparison& c, double entropy_floor);
// The same as one JSON object: per arm its optima, law and intervals; the multipliers; the
// point-wise ratios; the seed spread.
std::string comparison_json(const Comparison& c);
// Loss against compute: each arm's optima and its fitted law (along its frontier); the optima of
// a point-wise arm as points alone.
std::string render_comparison_svg(const Comparison& c);
// Loss against the learning rate: one curve per arm, size and budget (failed runs are gaps).
std::string render_lr_svg(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                          const std::string& column);

}  // namespace k3::sweep
