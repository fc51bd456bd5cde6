#include "k3/train/loop/peer_loss.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <vector>

#include "k3/dist/peers.h"
#include "k3/dist/runtime.h"
#include "k3/train/checkpoint/checkpoint.h"

namespace k3::train {
namespace {

// How long a probe waits for a host to answer: within the second the launcher allows a
// survivor between its SIGTERM and its SIGKILL.
constexpr std::chrono::milliseconds kProbeTimeout{400};

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::string peer_loss_line(const std::string& what, const std::string& run_dir) {
  const std::string stops = "k3lab: " + what + ", so the run stops";
  const std::string resume = "; k3lab train --resume " + run_dir + " continues from ";
  // The lead writes checkpoints: on another machine the run directory may not be visible.
  if (!std::filesystem::is_directory(run_dir)) return stops + resume + "its newest checkpoint";
  const std::vector<std::string> saved = list_checkpoints(run_dir);
  if (saved.empty()) return stops + " before its first checkpoint";
  return stops + resume + "checkpoints/" + std::filesystem::path(saved.front()).filename().string();
}

PeerLossNote::PeerLossNote(std::string run_dir)
    : run_dir_(std::move(run_dir)), stop_note_([this] { note(); }) {}

void PeerLossNote::note() const {
  // One line for the job, from the first live rank on the lead's host: where mpirun usually runs,
  // and the one host whose line reaches the user whichever other host is lost.
  if (!dist::lead_host_here() || !dist::first_live_rank_here()) return;
  std::string what;
  if (const std::vector<int> ended_here = dist::ended_ranks_here(); !ended_here.empty())
    what = rank_list(ended_here) + " ended";
  // Elsewhere: ranks whose port refuses ended; hosts that do not answer are lost.
  std::map<std::string, std::vector<int>> ended, unreachable;
  for (const dist::PeerProbe& p : dist::probe_remote_peers(kProbeTimeout)) {
    if (p.state == dist::PeerState::ended) ended[p.host].push_back(p.rank);
    if (p.state == dist::PeerState::unreachable) unreachable[p.host].push_back(p.rank);
  }
  for (const auto& [host, ranks] : ended)
    what += (what.empty() ? "" : "; ") + rank_list(ranks) + " (host " + host + ") ended";
  for (const auto& [host, ranks] : unreachable)
    what += (what.empty() ? "host " : "; host ") + host + " (" + rank_list(ranks) +
            ") cannot be reached";
  if (what.empty()) return;  // every rank runs: a stop request
  std::string line;
  try {
    line = peer_loss_line(what, run_dir_) + "\n";
  } catch (const std::exception& e) {  // the lead pruning checkpoints as they are listed
    line = "k3lab: " + what + ", so the run stops (" + std::string(e.what()) + ")\n";
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace k3::train
