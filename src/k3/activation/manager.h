// The activation manager: every layer saves what its backward needs here, by name, and reads it
// back in backward. How a saved tensor is held is the manager's policy (policy.h), never the
// layer's code: keep, recompute, fp8, bf16 or offload, chosen per tensor by the rules. A layer must
// therefore treat what load() returns as a fresh read-only view, not as the pointer it saved, and
// save a tensor only once its contents are final.
//
// The model cuts its forward into segments (a decoder layer, or each half of one) and runs each
// inside a SegmentScope. What a segment saves is handled by policy:
//   - memory that outlives the segment (allocated before it: the residual stream, a stage's
//     input; or outside the arena) is referenced, at no cost, whatever the policy;
//   - fp8 and bf16 encode the tensor into the manager's pool when saved, offload starts a transfer to the
//     offload store (waited for when the segment ends), recompute stores nothing;
//   - keep references the tensor where it lies. A segment whose tensors are all kept stays in the
//     arena (it is not rewound: copying it out would cost more than it spares); in a segment with
//     other policies the kept tensors are copied into the pool when it ends and the arena is
//     rewound to where the segment began.
// Before a segment's backward, restore() brings its tensors back: fp8 and bf16 are decoded, offloaded
// tensors are waited for (and the segment the backward reaches next starts coming back), and
// recompute runs the segment's forward again (`rerun`, the model's own code), taking from it the
// tensors under that policy. finish() frees the segment's tensors after its backward. Saves
// outside any segment are referenced, as memory that lives until the backward.
//
// Several micro-batches can be in flight at once (a pipeline schedule runs the forwards of some
// before the backwards of others): every tensor is saved under the id of its micro-batch, given
// when that micro-batch's forward starts, and one micro-batch's tensors are released on their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "k3/activation/buffer_pool.h"
#include "k3/activation/offload.h"
#include "k3/activation/policy.h"
#include "k3/base/arena.h"
#include "k3/base/timer.h"
#include "k3/tensor/tensor.h"

namespace k3::activation {

// A segment of the forward: `id` is unique within a micro-batch's forward; the tensors it saves
// are named PREFIX + ROLE and classed "KIND.LAYER.ROLE".
struct SegmentInfo {
  int64_t id = 0;
  std::string kind;
  int64_t layer = 0;
  std::string prefix;  // "model.layers.3."
};

// What the forward saved, segment by segment, for the budget planner and the predictions in
// metrics.jsonl.
struct TensorProfile {
  std::string key;    // class key, "kda.3.self_attn.q"
  int64_t floats = 0;
  bool exact = false;      // never stored in fp8 or bf16
  bool reference = false;  // memory outliving the segment: referenced, never stored
};
struct SegmentProfile {
  SegmentInfo info;
  double forward_seconds = 0;  // the segment's forward, as the step ran it
  size_t arena_bytes = 0;      // what it took of the arena: held there when all its tensors are kept
  std::vector<TensorProfile> tensors;
};

// Counters since the last reset_stats(), per tensor class ("KIND.ROLE", over layers).
struct ClassStats {
  int64_t tensors = 0;
  size_t bytes[kNumPolicies] = {};  // f32 bytes saved, by the policy that held them (Policy order)
  size_t referenced = 0;  // f32 bytes of memory that outlived its segment: referenced, not held
};
struct ManagerStats {
  std::map<std::string, ClassStats> classes;
  double recompute_seconds = 0;   // re-running forwards
  double codec_seconds = 0;       // encoding and decoding (fp8, bf16)
  double offload_seconds = 0;     // waiting for transfers
  double keep_seconds = 0;        // copying kept tensors into the pool (segments not all kept)
  size_t stored_peak = 0;         // the pool's peak: kept, encoded, and restored tensors
  size_t offloaded_peak = 0;      // the offload store's peak
  int in_flight_peak = 0;         // micro-batches holding tensors at once
};

class ActivationManager {
 public:
  ActivationManager() = default;  // everything kept
  ActivationManager(const ActivationManager&) = delete;
  ActivationManager& operator=(const ActivationManager&) = delete;

  // The rules and granularity; only between steps (nothing in flight).
  void configure(PolicyRules rules, Granularity granularity = Granularity::Sublayer);
  // Where offloaded tensors go (default: a HostOffload, made on first use).
  void set_offload_store(std::unique_ptr<OffloadStore> store);
  const PolicyRules& rules() const { return rules_; }
  Granularity granularity() const { return granularity_; }

  // Forward. `arena` is the micro-batch's arena; memory it held before begin_segment outlives
  // the segment. Segments do not nest.
  void begin_segment(int micro_batch, const SegmentInfo& info, const Arena& arena);
  // Whether the segment stays in the arena (all its tensors kept); if not, the caller rewinds it.
  bool end_segment(int micro_batch);
  void abandon_segment(int micro_batch);  // a forward that threw: the segment is closed as is
  // Saves n floats at p under `name`; exact: integers or copies that fp8 and bf16 must not round.
  void save(int micro_batch, std::string_view name, const float* p, int64_t n, bool exact = false);

  // Backward of segment `segment`: restore before it, finish after it. `rerun` runs the
  // segment's forward again (its own SegmentScope with the same id); called only when the
  // segment has tensors under recompute.
  void restore(int micro_batch, int64_t segment, const std::function<void()>& rerun);
  void finish(int micro_batch, int64_t segment);
  // Whether a forward is being re-run: layers then record no statistics (Step::records_statistics).
  bool recomputing() const { return recomputing_.has_value() || quiet_; }
  // A whole forward and backward that must leave no trace in statistics (the budget's profiling
  // pass): recomputing() is true throughout.
  void set_quiet(bool quiet) { quiet_ = quiet; }

  // The tensor that micro-batch saved under `name`; throws when nothing was saved under it or its
  // segment was not restored.
  Tensor load(int micro_batch, std::string_view name) const;
  bool contains(int micro_batch, std::string_view name) const;

  // Forgets what one micro-batch saved (after its backward, or after a forward without backward).
  void release(int micro_batch);
  // Forgets everything.
  void clear();

  size_t count() const;  // tensors saved, over all micro-batches in flight
  size_t in_flight() const { return micro_.size(); }  // micro-batches holding tensors

  // Accounting. Every segment the forwards ran, in segment order (the latest run of each).
  std::vector<SegmentProfile> profile() const;
  const ManagerStats& stats() const { return stats_; }
  void reset_stats();
  size_t stored_bytes() const { return pool_.in_use(); }

 private:
  struct Record {
    int64_t segment = -1;  // -1: saved outside segments
    Policy policy = Policy::Keep;
    bool reference = false;
    int64_t floats = 0;
    const float* view = nullptr;  // what load() returns, once available
    bool available = false;       // referenced or kept, or restored
    void* stored = nullptr;       // pool buffer: the kept copy (if any), or the fp8 or bf16 codes
    OffloadStore::Handle handle = -1;
    float* restored = nullptr;    // pool buffer: decoded, fetched or recomputed floats
    bool fetching = false;        // offload: the transfer back has started
  };
  struct Segment {
    SegmentInfo info;
    std::vector<std::string> names;
    bool recompute = false, offload = false, encoded = false, restored = false;
    int kept = 0;  // tensors kept in the segment's own memory
    // Nothing but kept tensors, held where they lie.
    bool in_arena() const { return kept > 0 && !recompute && !offload && !encoded; }
  };
  struct Micro {
    std::unordered_map<std::string, Record> records;
    std::vector<Segment> segments;  // forward order
    int open = -1;                  // the segment being run forward
    const Arena* arena = nullptr;
    int64_t mark = 0;  // arena offset where the open segment began
    Timer started;     // when it began
  };

  Micro& micro(int micro_batch);
  const Record* find(int micro_batch, std::string_view name) const;
  int segment_index(const Micro& m, int64_t segment) const;
  void save_recomputed(Micro& m, std::string_view name, const float* p, int64_t n);
  void copy_kept(Micro& m, const Segment& seg);  // into the pool, before the arena is rewound
  void fetch(Record& r);  // starts an offloaded tensor's transfer back
  void free_record(Record& r);
  OffloadStore& offload();
  void note_peaks();

  PolicyRules rules_;
  Granularity granularity_ = Granularity::Sublayer;
  std::unique_ptr<OffloadStore> offload_;
  BufferPool pool_;
  std::unordered_map<int, Micro> micro_;
  std::optional<std::pair<int, int64_t>> recomputing_;  // (micro-batch, segment) being re-run
  bool quiet_ = false;
  std::map<int64_t, SegmentProfile> profile_;
  ManagerStats stats_;
};

// One segment of the forward, as a scope: opens it in the manager (when the step saves for a
// backward), and at its end closes it and rewinds the arena to where it began, unless the manager
// holds the segment there (all its tensors kept).
class SegmentScope {
 public:
  SegmentScope(ActivationManager& acts, Arena& arena, int micro_batch, const SegmentInfo& info,
               bool active);
  ~SegmentScope() noexcept(false);
  SegmentScope(const SegmentScope&) = delete;
  SegmentScope& operator=(const SegmentScope&) = delete;

 private:
  ActivationManager& acts_;
  Arena& arena_;
  int micro_batch_;
  bool active_;
  size_t mark_;
  int uncaught_;
};

}  // namespace k3::activation
