// The job's ranks on other machines, and whether they still answer: what tells a lost host or a
// rank that ended elsewhere from a stop request, where no process of theirs can be seen from here.
// Every rank of a multi-rank job listens on a TCP port of its own (a thread accepts each
// connection and closes it) and learns every rank's host name and port when the job starts. A
// probe connects to each rank on another machine at once: a refused connection is a rank whose
// process ended (its host answers for it), no answer within the timeout a host that cannot be
// reached (down, or its link cut).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace k3::dist {

enum class PeerState { alive, ended, unreachable };

struct PeerProbe {
  int rank = 0;
  std::string host;
  PeerState state = PeerState::alive;
};

// Collective over the world: Runtime calls it at start-up under a launcher. A failure to listen
// or to resolve a host leaves those ranks unprobed (never an error: the probe is a diagnosis).
void start_peer_listener();

// Whether world rank 0 runs on this machine (always, in a world of one or on one host).
bool lead_host_here();

// Every rank on another machine (by host name), probed side by side within TIMEOUT. Makes no MPI
// call, so any thread may ask.
std::vector<PeerProbe> probe_remote_peers(std::chrono::milliseconds timeout);

}  // namespace k3::dist
