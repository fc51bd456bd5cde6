// The agent as a microVM's init (PID 1): loads the virtio modules packed in the initramfs, mounts
// the image's layers (read-only virtio disks) under a writable tmpfs with overlayfs, the host's
// /usr (a read-only 9p share) for the `host` image, then enters that root and serves requests on
// a virtio serial port (/dev/vport<N>p1).
#pragma once

#include <cstdint>

namespace k3::sandbox::agent {

// Sets the guest up; returns the request/reply descriptor. On failure prints why to the kernel
// console and powers off (the host sees the channel close). Commands run as root in the guest
// (the VM is the boundary), where RLIMIT_NPROC does not apply: they go into a cgroup of their own
// whose pids.max bounds them instead (set_command_cgroup_limit, join_command_cgroup).
int guest_init();

// The overlay's upper directory (the writable layer), open since before the agent entered the
// root where it is out of sight; -1 outside a microVM.
int writable_layer_fd();

// Sets the commands' cgroup's process limit (0: none). No-op outside a microVM.
void set_command_cgroup_limit(uint64_t processes);
// Kills every process in the commands' cgroup; returns 1 while some are still there, 0 once none
// is, -1 outside a microVM.
int kill_command_cgroup();
// In a command's forked child: joins the commands' cgroup (async-signal-safe). No-op outside.
void join_command_cgroup();

}  // namespace k3::sandbox::agent
