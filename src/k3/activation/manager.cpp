#include "k3/activation/manager.h"

#include "k3/base/error.h"

namespace k3::activation {

void ActivationManager::save(int micro_batch, std::string_view name, const Tensor& t) {
  auto [it, inserted] = saved_[micro_batch].try_emplace(std::string(name), t);
  K3_CHECK(inserted, "activation '", name, "' saved twice in micro-batch ", micro_batch);
}

const ActivationManager::Saved* ActivationManager::find(int micro_batch) const {
  auto it = saved_.find(micro_batch);
  return it == saved_.end() ? nullptr : &it->second;
}

Tensor ActivationManager::load(int micro_batch, std::string_view name) const {
  const Saved* saved = find(micro_batch);
  auto it = saved ? saved->find(std::string(name)) : Saved::const_iterator{};
  K3_CHECK(saved && it != saved->end(), "activation '", name,
           "' was not saved in the forward of micro-batch ", micro_batch);
  return it->second;
}

bool ActivationManager::contains(int micro_batch, std::string_view name) const {
  const Saved* saved = find(micro_batch);
  return saved && saved->count(std::string(name)) != 0;
}

void ActivationManager::release(int micro_batch) { saved_.erase(micro_batch); }

void ActivationManager::clear() { saved_.clear(); }

size_t ActivationManager::count() const {
  size_t n = 0;
  for (const auto& [id, saved] : saved_) n += saved.size();
  return n;
}

}  // namespace k3::activation
