#include "k3/activation/manager.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "k3/base/error.h"
#include "k3/base/timer.h"
#include "k3/tensor/bf16.h"
#include "k3/tensor/fp8_e4m3.h"

namespace k3::activation {
namespace {

size_t f32_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// "kda.3.self_attn.q" -> "kda.self_attn.q": the class over layers.
std::string class_over_layers(const SegmentInfo& s, std::string_view role) {
  return s.kind + "." + std::string(role);
}

}  // namespace

void ActivationManager::configure(PolicyRules rules, Granularity granularity) {
  K3_CHECK(micro_.empty(), "ActivationManager::configure with micro-batches in flight");
  rules_ = std::move(rules);
  granularity_ = granularity;
}

void ActivationManager::set_offload_store(std::unique_ptr<OffloadStore> store) {
  K3_CHECK(micro_.empty(), "ActivationManager::set_offload_store with micro-batches in flight");
  offload_ = std::move(store);
}

OffloadStore& ActivationManager::offload() {
  if (!offload_) offload_ = std::make_unique<HostOffload>();
  return *offload_;
}

ActivationManager::Micro& ActivationManager::micro(int micro_batch) {
  Micro& m = micro_[micro_batch];
  stats_.in_flight_peak = std::max(stats_.in_flight_peak, static_cast<int>(micro_.size()));
  return m;
}

void ActivationManager::note_peaks() {
  stats_.stored_peak = std::max(stats_.stored_peak, pool_.in_use());
  if (offload_) stats_.offloaded_peak = std::max(stats_.offloaded_peak, offload_->held());
}

void ActivationManager::begin_segment(int micro_batch, const SegmentInfo& info,
                                      const Arena& arena) {
  Micro& m = micro(micro_batch);
  K3_CHECK(m.open < 0, "activation segment ", info.id, " begun inside segment ",
           m.open >= 0 ? m.segments[static_cast<size_t>(m.open)].info.id : -1);
  m.arena = &arena;
  m.mark = static_cast<int64_t>(arena.used());
  m.started.reset();
  if (recomputing_) {
    K3_CHECK(recomputing_->first == micro_batch && recomputing_->second == info.id,
             "a recompute of segment ", recomputing_->second, " ran segment ", info.id);
    m.open = segment_index(m, info.id);
    return;
  }
  K3_CHECK(segment_index(m, info.id) < 0, "activation segment ", info.id,
           " run twice in the forward of micro-batch ", micro_batch);
  m.segments.push_back({info, {}});
  m.open = static_cast<int>(m.segments.size()) - 1;
  profile_[info.id] = {info, 0, 0, {}};
}

bool ActivationManager::end_segment(int micro_batch) {
  Micro& m = micro(micro_batch);
  K3_CHECK(m.open >= 0, "end_segment without a segment in micro-batch ", micro_batch);
  Segment& seg = m.segments[static_cast<size_t>(m.open)];
  m.open = -1;
  if (recomputing_) return false;
  SegmentProfile& prof = profile_[seg.info.id];
  prof.forward_seconds = m.started.seconds();
  prof.arena_bytes = m.arena->used() - static_cast<size_t>(m.mark);
  if (seg.in_arena()) return true;
  // The arena is rewound after this: offloaded tensors must be out by then.
  if (seg.offload) {
    Timer waited;
    for (const std::string& name : seg.names) {
      const Record& r = m.records.at(name);
      if (r.policy == Policy::Offload && !r.reference) offload().wait(r.handle);
    }
    stats_.offload_seconds += waited.seconds();
  }
  copy_kept(m, seg);
  note_peaks();
  return false;
}

void ActivationManager::copy_kept(Micro& m, const Segment& seg) {
  if (seg.kept == 0) return;
  Timer t;
  for (const std::string& name : seg.names) {
    Record& r = m.records.at(name);
    if (r.policy != Policy::Keep || r.reference) continue;
    r.stored = pool_.acquire(f32_bytes(r.floats));
    std::memcpy(r.stored, r.view, f32_bytes(r.floats));
    r.view = static_cast<const float*>(r.stored);
  }
  stats_.keep_seconds += t.seconds();
}

int ActivationManager::segment_index(const Micro& m, int64_t segment) const {
  for (size_t i = 0; i < m.segments.size(); ++i)
    if (m.segments[i].info.id == segment) return static_cast<int>(i);
  return -1;
}

void ActivationManager::save(int micro_batch, std::string_view name, const float* p, int64_t n,
                             bool exact) {
  Micro& m = micro(micro_batch);
  if (recomputing_) {
    save_recomputed(m, name, p, n);
    return;
  }
  auto [it, inserted] = m.records.try_emplace(std::string(name));
  K3_CHECK(inserted, "activation '", name, "' saved twice in micro-batch ", micro_batch);
  Record& r = it->second;
  r.floats = n;
  const int64_t at = m.arena ? m.arena->offset_of(p) : -1;
  if (m.open < 0 || at < m.mark) {  // outlives the segment (or no segment): a reference
    r.reference = true;
    r.view = p;
    r.available = true;
  }
  if (m.open < 0) return;
  Segment& seg = m.segments[static_cast<size_t>(m.open)];
  r.segment = seg.info.id;
  seg.names.emplace_back(name);
  const std::string_view prefix = seg.info.prefix;
  K3_CHECK(name.substr(0, prefix.size()) == prefix, "activation '", name,
           "' saved in the segment of ", prefix);
  const std::string_view role = name.substr(prefix.size());
  const std::string key = seg.info.kind + "." + std::to_string(seg.info.layer) + "." +
                          std::string(role);
  profile_[seg.info.id].tensors.push_back({key, n, exact, r.reference});
  Policy policy = rules_.policy_of(key);
  if (lossy(policy) && exact) policy = Policy::Keep;
  if (r.reference) policy = Policy::Keep;
  r.policy = policy;
  ClassStats& cs = stats_.classes[class_over_layers(seg.info, role)];
  cs.tensors += 1;
  if (r.reference) {
    cs.referenced += f32_bytes(n);
    return;
  }
  cs.bytes[static_cast<size_t>(policy)] += f32_bytes(n);
  switch (policy) {
    case Policy::Keep:  // in place until the segment ends (end_segment)
      r.view = p;
      r.available = true;
      seg.kept += 1;
      break;
    case Policy::Fp8: {
      Timer t;
      r.stored = pool_.acquire(fp8_block_bytes(n));
      fp8_block_encode(p, n, r.stored);
      seg.encoded = true;
      stats_.codec_seconds += t.seconds();
      break;
    }
    case Policy::Bf16: {
      Timer t;
      r.stored = pool_.acquire(static_cast<size_t>(n) * sizeof(uint16_t));
      float_to_bf16(p, static_cast<uint16_t*>(r.stored), n);
      seg.encoded = true;
      stats_.codec_seconds += t.seconds();
      break;
    }
    case Policy::Offload:
      r.handle = offload().put(p, f32_bytes(n));
      seg.offload = true;
      break;
    case Policy::Recompute:
      seg.recompute = true;
      break;
  }
  note_peaks();
}

void ActivationManager::save_recomputed(Micro& m, std::string_view name, const float* p,
                                        int64_t n) {
  auto it = m.records.find(std::string(name));
  K3_CHECK(it != m.records.end() && it->second.floats == n, "the recompute of segment ",
           recomputing_->second, " saved '", name, "' (", n,
           " floats), which its forward did not save so");
  Record& r = it->second;
  if (r.policy != Policy::Recompute || r.restored) return;
  r.restored = static_cast<float*>(pool_.acquire(f32_bytes(n)));
  std::memcpy(r.restored, p, f32_bytes(n));
  r.view = r.restored;
  r.available = true;
}

void ActivationManager::fetch(Record& r) {
  if (r.fetching) return;
  r.restored = static_cast<float*>(pool_.acquire(f32_bytes(r.floats)));
  offload().get(r.handle, r.restored);
  r.fetching = true;
}

void ActivationManager::restore(int micro_batch, int64_t segment,
                                const std::function<void()>& rerun) {
  Micro& m = micro(micro_batch);
  const int index = segment_index(m, segment);
  K3_CHECK(index >= 0, "restore: micro-batch ", micro_batch, " ran no activation segment ",
           segment);
  Segment& seg = m.segments[static_cast<size_t>(index)];
  K3_CHECK(!seg.restored, "activation segment ", segment, " restored twice");
  seg.restored = true;
  for (const std::string& name : seg.names) {
    Record& r = m.records.at(name);
    if (r.reference) continue;
    if (lossy(r.policy)) {
      Timer t;
      r.restored = static_cast<float*>(pool_.acquire(f32_bytes(r.floats)));
      if (r.policy == Policy::Fp8)
        fp8_block_decode(r.stored, r.floats, r.restored);
      else
        bf16_to_float(static_cast<const uint16_t*>(r.stored), r.restored, r.floats);
      r.view = r.restored;
      r.available = true;
      stats_.codec_seconds += t.seconds();
    } else if (r.policy == Policy::Offload) {
      fetch(r);
      Timer t;
      offload().wait(r.handle);
      stats_.offload_seconds += t.seconds();
      r.view = r.restored;
      r.available = true;
    }
  }
  if (seg.recompute) {
    Timer t;
    recomputing_ = {micro_batch, segment};
    try {
      rerun();
    } catch (...) {
      recomputing_.reset();
      throw;
    }
    recomputing_.reset();
    stats_.recompute_seconds += t.seconds();
    for (const std::string& name : seg.names)
      K3_CHECK(m.records.at(name).available, "the recompute of segment ", segment, " did not save '",
               name, "'");
  }
  // The backward reaches the segment before this one next: its offloaded tensors start back now.
  if (index > 0 && m.segments[static_cast<size_t>(index - 1)].offload)
    for (const std::string& name : m.segments[static_cast<size_t>(index - 1)].names) {
      Record& r = m.records.at(name);
      if (r.policy == Policy::Offload && !r.reference) fetch(r);
    }
  note_peaks();
}

void ActivationManager::free_record(Record& r) {
  if (r.handle >= 0) offload().free(r.handle);
  if (r.stored) pool_.release(r.stored);
  if (r.restored) pool_.release(r.restored);
  r = Record{};
}

void ActivationManager::finish(int micro_batch, int64_t segment) {
  Micro& m = micro(micro_batch);
  const int index = segment_index(m, segment);
  K3_CHECK(index >= 0 && m.segments[static_cast<size_t>(index)].restored, "finish: segment ",
           segment, " of micro-batch ", micro_batch, " was not restored");
  for (const std::string& name : m.segments[static_cast<size_t>(index)].names) {
    auto it = m.records.find(name);
    free_record(it->second);
    m.records.erase(it);
  }
  m.segments[static_cast<size_t>(index)].names.clear();
}

const ActivationManager::Record* ActivationManager::find(int micro_batch,
                                                         std::string_view name) const {
  auto m = micro_.find(micro_batch);
  if (m == micro_.end()) return nullptr;
  auto it = m->second.records.find(std::string(name));
  return it == m->second.records.end() ? nullptr : &it->second;
}

Tensor ActivationManager::load(int micro_batch, std::string_view name) const {
  const Record* r = find(micro_batch, name);
  K3_CHECK(r, "activation '", name, "' was not saved in the forward of micro-batch ",
           micro_batch);
  K3_CHECK(r->available, "activation '", name, "' (", policy_name(r->policy),
           ") was loaded before its segment was restored");
  return Tensor::view(const_cast<float*>(r->view), {r->floats});
}

bool ActivationManager::contains(int micro_batch, std::string_view name) const {
  return find(micro_batch, name) != nullptr;
}

void ActivationManager::release(int micro_batch) {
  auto it = micro_.find(micro_batch);
  if (it == micro_.end()) return;
  for (auto& [name, r] : it->second.records) free_record(r);
  micro_.erase(it);
}

void ActivationManager::clear() {
  while (!micro_.empty()) release(micro_.begin()->first);
}

size_t ActivationManager::count() const {
  size_t n = 0;
  for (const auto& [id, m] : micro_) n += m.records.size();
  return n;
}

std::vector<SegmentProfile> ActivationManager::profile() const {
  std::vector<SegmentProfile> out;
  for (const auto& [id, p] : profile_) out.push_back(p);
  return out;
}

void ActivationManager::reset_stats() {
  stats_ = ManagerStats{};
  pool_.reset_peak();
  stats_.stored_peak = pool_.in_use();
  stats_.offloaded_peak = offload_ ? offload_->held() : 0;
}

SegmentScope::SegmentScope(ActivationManager& acts, Arena& arena, int micro_batch,
                           const SegmentInfo& info, bool active)
    : acts_(acts), arena_(arena), micro_batch_(micro_batch), active_(active), mark_(arena.mark()),
      uncaught_(std::uncaught_exceptions()) {
  if (active_) acts_.begin_segment(micro_batch_, info, arena_);
}

void ActivationManager::abandon_segment(int micro_batch) {
  auto it = micro_.find(micro_batch);
  if (it != micro_.end()) it->second.open = -1;
}

SegmentScope::~SegmentScope() noexcept(false) {
  if (!active_) return;
  if (std::uncaught_exceptions() > uncaught_)
    acts_.abandon_segment(micro_batch_);  // the forward failed: its error is the one to see
  else if (acts_.end_segment(micro_batch_))  // offloads still read the segment's memory until then
    return;                                   // held in the arena: its kept tensors lie there
  arena_.rewind(mark_);
}

}  // namespace k3::activation
