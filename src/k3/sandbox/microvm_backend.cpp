#include "k3/sandbox/microvm_backend.h"

#include <unistd.h>

#include "k3/base/error.h"

namespace k3::sandbox {

MicrovmBackend::MicrovmBackend(ImageStore& store) : store_(store) {}

std::string MicrovmBackend::unavailable_reason() const {
  if (access("/dev/kvm", R_OK | W_OK) != 0) return "no usable /dev/kvm on this machine";
  return "the microvm backend is not implemented yet";
}

std::unique_ptr<Sandbox> MicrovmBackend::create(const Image&, const Limits&) {
  throw Error(unavailable_reason());
}

}  // namespace k3::sandbox
