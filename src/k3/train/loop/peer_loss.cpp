#include "k3/train/loop/peer_loss.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "k3/dist/runtime.h"
#include "k3/train/checkpoint/checkpoint.h"

namespace k3::train {

std::string peer_loss_line(const std::vector<int>& ended_ranks, const std::string& run_dir) {
  std::string ranks;
  for (int r : ended_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  const std::string stops = "k3lab: rank" + std::string(ended_ranks.size() > 1 ? "s " : " ") +
                            ranks + " ended, so the run stops";
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
  const std::vector<int> ended = dist::ended_ranks_here();
  if (ended.empty() || !dist::first_live_rank_here()) return;
  std::string line;
  try {
    line = peer_loss_line(ended, run_dir_) + "\n";
  } catch (const std::exception& e) {  // the lead pruning checkpoints as they are listed
    line = "k3lab: a rank ended, so the run stops (" + std::string(e.what()) + ")\n";
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace k3::train
