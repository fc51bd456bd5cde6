#include "k3/activation/manager.h"

#include "k3/base/error.h"

namespace k3::activation {

void ActivationManager::save(std::string_view name, const Tensor& t) {
  auto [it, inserted] = saved_.try_emplace(std::string(name), t);
  K3_CHECK(inserted, "activation '", name, "' saved twice in one micro-batch");
}

Tensor ActivationManager::load(std::string_view name) const {
  auto it = saved_.find(std::string(name));
  K3_CHECK(it != saved_.end(), "activation '", name, "' was not saved in forward");
  return it->second;
}

bool ActivationManager::contains(std::string_view name) const {
  return saved_.count(std::string(name)) != 0;
}

void ActivationManager::clear() { saved_.clear(); }

}  // namespace k3::activation
