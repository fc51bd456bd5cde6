// The microVM backend: each sandbox is a KVM guest with its own kernel, as Firecracker gives
// AgentENV. Firecracker is not packaged in Debian; QEMU's `microvm` machine (no PCI, no firmware
// tables beyond what a kernel needs, virtio-mmio devices only) is the closest packaged equivalent.
//
// Boot path: qemu-system-x86_64 -M microvm loads a kernel directly (no bootloader): k3lab's own
// guest kernel where scripts/build-guest-kernel.sh put it in the store, else the host's Debian
// kernel (/boot/vmlinuz-*), with an initramfs that k3lab builds once per kernel and agent: the
// static agent as /init, and the virtio modules it needs (mmio, block, console, overlayfs, 9p)
// where the kernel has them as modules.
// The image's layers are read-only virtio disks (ext4 files made once per layer and kept in the
// store), under a writable tmpfs of the disk limit's size via overlayfs; the built-in `host`
// image's /usr is a read-only 9p share, where the guest kernel has 9p (Debian's cloud kernel has
// not: there, microVMs run store images only). Requests go over a virtio serial port on QEMU's
// stdin and stdout. A guest that panics reboots, which with -no-reboot ends QEMU: the sandbox is
// gone and the host sees only a closed channel.
#pragma once

#include "k3/sandbox/fork_thread.h"
#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class MicrovmBackend : public Backend {
 public:
  explicit MicrovmBackend(ImageStore& store);
  std::unique_ptr<Sandbox> create(const Image& image, const Limits& limits) override;
  std::string unavailable_reason() const override;

  // The ext4 disk of a layer (made on first use) and a kernel's initramfs (made once).
  std::string layer_disk(const std::string& layer_dir);
  std::string initramfs(const std::string& kernel);  // for that kernel
  // The kernel sandboxes of store images (HOST_IMAGE false) or of `host` boot; "" if none.
  const std::string& kernel(bool host_image) const { return host_image ? host_kernel_ : kernel_; }

 private:
  ImageStore& store_;
  ForkThread forker_;
  std::string qemu_, agent_, accel_, why_unavailable_;
  std::string kernel_;       // for store images
  std::string host_kernel_;  // for the `host` image: one with 9p, to share the host's /usr; or ""
  std::mutex build_mutex_;
};

}  // namespace k3::sandbox
