// The agent as a microVM's init (PID 1): loads the virtio modules packed in the initramfs, mounts
// the image's layers (read-only virtio disks) under a writable tmpfs with overlayfs, the host's
// /usr (a read-only 9p share) for the `host` image, then enters that root and serves requests on
// the virtio console /dev/hvc0.
#pragma once

namespace k3::sandbox::agent {

// Sets the guest up; returns the request/reply descriptor. On failure prints why to the kernel
// console and powers off (the host sees the channel close).
int guest_init();

}  // namespace k3::sandbox::agent
