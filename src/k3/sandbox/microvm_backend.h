// The microVM backend: each sandbox is a KVM guest with its own kernel (docs/sandbox.md).
#pragma once

#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class MicrovmBackend : public Backend {
 public:
  explicit MicrovmBackend(ImageStore& store);
  std::unique_ptr<Sandbox> create(const Image& image, const Limits& limits) override;
  std::string unavailable_reason() const override;

 private:
  ImageStore& store_;
};

}  // namespace k3::sandbox
