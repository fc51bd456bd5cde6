#include "k3/train/loop/activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/timer.h"
#include "k3/parallel/offload/peer_offload.h"

namespace k3::train {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Every rank that runs a segment must choose the same policies for it (a recompute re-runs its
// collectives), so the plan is made from figures averaged over the ranks holding each segment.
std::vector<activation::SegmentProfile> agreed(std::vector<activation::SegmentProfile> segs,
                                               const dist::Comm& world) {
  if (world.size() == 1) return segs;
  const auto P = static_cast<size_t>(world.size()), me = static_cast<size_t>(world.rank());
  std::vector<int64_t> shape(2 * P, 0);
  for (const auto& s : segs) {
    shape[2 * me] = std::max(shape[2 * me], s.info.id + 1);
    shape[2 * me + 1] =
        std::max<int64_t>(shape[2 * me + 1], static_cast<int64_t>(s.tensors.size()));
  }
  world.all_gather(shape.data(), std::vector<int64_t>(P, 2));
  int64_t ids = 0, width = 0;
  for (size_t r = 0; r < P; ++r) {
    ids = std::max(ids, shape[2 * r]);
    width = std::max(width, shape[2 * r + 1]);
  }
  const int64_t row = 3 + width;  // holders, seconds, arena bytes, floats of each tensor
  std::vector<double> sums(static_cast<size_t>(ids * row), 0.0);
  for (const auto& s : segs) {
    double* r = sums.data() + s.info.id * row;
    r[0] = 1;
    r[1] = s.forward_seconds;
    r[2] = static_cast<double>(s.arena_bytes);
    for (size_t j = 0; j < s.tensors.size(); ++j)
      r[3 + j] = static_cast<double>(s.tensors[j].floats);
  }
  world.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
  for (auto& s : segs) {
    const double* r = sums.data() + s.info.id * row;
    s.forward_seconds = r[1] / r[0];
    s.arena_bytes = static_cast<size_t>(std::ceil(r[2] / r[0]));
    for (size_t j = 0; j < s.tensors.size(); ++j)
      s.tensors[j].floats = static_cast<int64_t>(std::ceil(r[3 + j] / r[0]));
  }
  return segs;
}

size_t max_over(const dist::Comm& world, size_t v) {
  std::vector<int64_t> all(static_cast<size_t>(world.size()), 0);
  all[static_cast<size_t>(world.rank())] = static_cast<int64_t>(v);
  world.all_gather(all.data(), std::vector<int64_t>(all.size(), 1));
  return static_cast<size_t>(*std::max_element(all.begin(), all.end()));
}

}  // namespace

double measure_copy_bandwidth() {
  const size_t bytes = size_t{64} << 20;
  char* a = static_cast<char*>(map_buffer(bytes));
  char* b = static_cast<char*>(map_buffer(bytes));
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    Timer t;
    std::memcpy(b, a, bytes);
    best = std::max(best, static_cast<double>(bytes) / t.seconds());
  }
  unmap_buffer(a, bytes);
  unmap_buffer(b, bytes);
  return best;
}

activation::PolicyRules activation_rules(const ActivationSection& a) {
  const std::optional<activation::Policy> p = activation::parse_policy(a.policy);
  K3_CHECK(p, "activation.policy: unknown policy \"", a.policy, "\" (expected ",
           activation::policy_names(), ")");
  return {*p, activation::PolicyRules::parse(a.rules, "activation.rules")};
}

activation::Granularity activation_granularity(const ActivationSection& a) {
  return a.granularity == "layer" ? activation::Granularity::Layer
                                  : activation::Granularity::Sublayer;
}

ActivationRun::ActivationRun(const ActivationSection& config, activation::ActivationManager& acts,
                             const dist::ProcessGrid& grid)
    : config_(config), acts_(acts), grid_(grid) {
  acts_.configure(activation_rules(config_), activation_granularity(config_));
  if (!config_.budget.empty()) {
    const std::optional<double> b = parse_bytes(config_.budget);
    K3_CHECK(b, "activation.budget: \"", config_.budget, "\" is not a size such as \"2GiB\"");
    budget_ = static_cast<size_t>(*b);
    copy_bandwidth_ =
        static_cast<double>(max_over(grid_.world(), static_cast<size_t>(measure_copy_bandwidth())));
  }
  if (config_.offload_to == "peer") {
    K3_CHECK(grid_.world().size() > 1,
             "activation.offload_to = \"peer\": a run of one rank has no peer to offload to");
    acts_.set_offload_store(std::make_unique<parallel::PeerOffload>(
        grid_.world(), static_cast<size_t>(config_.peer_mib * kMiB)));
  }
}

activation::StepCosts ActivationRun::costs(size_t arena_peak) const {
  return {arena_peak, copy_bandwidth_, std::max(1, step_stats_.in_flight_peak)};
}

void ActivationRun::begin_profile() {
  acts_.configure({activation::Policy::Recompute,
                   activation::PolicyRules::parse(config_.rules, "activation.rules")},
                  activation_granularity(config_));
  acts_.set_quiet(true);
  acts_.reset_stats();
}

std::string ActivationRun::plan(size_t arena_peak) {
  acts_.set_quiet(false);
  step_stats_ = acts_.stats();
  profile_ = agreed(acts_.profile(), grid_.world());
  profile_arena_peak_ = max_over(grid_.world(), arena_peak);
  const activation::BudgetPlan plan = activation::plan_budget(
      profile_, activation::PolicyRules::parse(config_.rules, "activation.rules"),
      costs(profile_arena_peak_), budget_);
  acts_.configure(plan.rules, activation_granularity(config_));
  planned_ = true;
  return strprintf(
      "activation budget %s: of %zu segments, %d recomputed and %d offloaded; "
      "predicted peak %s, %.3f s more a step",
      format_bytes(static_cast<double>(budget_)).c_str(), profile_.size(), plan.segments_recomputed,
      plan.segments_offloaded, format_bytes(static_cast<double>(plan.prediction.peak)).c_str(),
      plan.prediction.extra_seconds);
}

void ActivationRun::begin_step() {
  acts_.reset_stats();
  predicted_.reset();
  if (!profile_.empty())
    predicted_ = activation::predict(profile_, acts_.rules(), costs(profile_arena_peak_));
}

void ActivationRun::end_step(size_t arena_peak) {
  step_stats_ = acts_.stats();
  measured_arena_ = arena_peak;
  ++steps_;
  for (const auto& [name, c] : step_stats_.classes) {
    activation::ClassStats& sum = run_stats_.classes[name];
    sum.tensors += c.tensors;
    for (size_t p = 0; p < activation::kNumPolicies; ++p) sum.bytes[p] += c.bytes[p];
    sum.referenced += c.referenced;
  }
  run_stats_.recompute_seconds += step_stats_.recompute_seconds;
  run_stats_.codec_seconds += step_stats_.codec_seconds;
  run_stats_.offload_seconds += step_stats_.offload_seconds;
  run_stats_.keep_seconds += step_stats_.keep_seconds;
  run_stats_.stored_peak = std::max(run_stats_.stored_peak, step_stats_.stored_peak);
  run_stats_.offloaded_peak = std::max(run_stats_.offloaded_peak, step_stats_.offloaded_peak);
  if (budget_ == 0) {  // the next step is predicted from this one
    profile_ = acts_.profile();
    const size_t held = activation::held_in_arena(profile_, acts_.rules()) *
                        static_cast<size_t>(std::max(1, step_stats_.in_flight_peak));
    profile_arena_peak_ = arena_peak - std::min(held, arena_peak);
  }
}

void ActivationRun::record(nlohmann::json& rec) const {
  rec["activation.peak_bytes"] = peak_bytes();
  rec["activation.arena_peak_bytes"] = measured_arena_;
  rec["activation.stored_peak_bytes"] = step_stats_.stored_peak;
  rec["activation.offloaded_peak_bytes"] = step_stats_.offloaded_peak;
  if (predicted_) rec["activation.predicted_peak_bytes"] = predicted_->peak;
  rec["activation.recompute_seconds"] = step_stats_.recompute_seconds;
  rec["activation.offload_wait_seconds"] = step_stats_.offload_seconds;
  rec["activation.codec_seconds"] = step_stats_.codec_seconds;
}

std::string ActivationRun::report() const {
  if (steps_ == 0) return "";
  const double per = 1.0 / static_cast<double>(steps_);
  std::string out = strprintf(
      "\nactivations (MiB a step, by the policy that held them; \"saved\" is what the policy "
      "spared the step's memory; \"referenced\" is memory that outlives its layer, held by the "
      "step arena):\n  %-44s %7s %10s %9s %9s %9s %9s %9s %9s\n",
      "class", "tensors", "referenced", "keep", "fp8", "bf16", "offload", "recompute", "saved");
  double total_saved = 0;
  for (const auto& [name, c] : run_stats_.classes) {
    auto mib = [&](activation::Policy p) {
      return static_cast<double>(c.bytes[static_cast<size_t>(p)]) * per / kMiB;
    };
    const double saved =
        mib(activation::Policy::Offload) + mib(activation::Policy::Recompute) +
        mib(activation::Policy::Fp8) * (1 - 1.03125 / 4) +  // a byte + a scale per 128
        mib(activation::Policy::Bf16) / 2;
    total_saved += saved;
    out += strprintf("  %-44s %7.0f %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name.c_str(),
                     static_cast<double>(c.tensors) * per,
                     static_cast<double>(c.referenced) * per / kMiB, mib(activation::Policy::Keep),
                     mib(activation::Policy::Fp8), mib(activation::Policy::Bf16),
                     mib(activation::Policy::Offload), mib(activation::Policy::Recompute), saved);
  }
  out += strprintf("  %-44s %7s %10s %9s %9s %9s %9s %9s %9.2f\n", "total", "", "", "", "", "", "",
                   "", total_saved);
  out += strprintf(
      "  time over the run: recompute %.3f s, fp8/bf16 encode/decode %.3f s, offload waits %.3f s, "
      "copies kept %.3f s; pool peak %s, offloaded peak %s (%s)\n",
      run_stats_.recompute_seconds, run_stats_.codec_seconds, run_stats_.offload_seconds,
      run_stats_.keep_seconds, format_bytes(static_cast<double>(run_stats_.stored_peak)).c_str(),
      format_bytes(static_cast<double>(run_stats_.offloaded_peak)).c_str(),
      config_.offload_to.c_str());
  return out;
}

}  // namespace k3::train
