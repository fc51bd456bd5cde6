// `k3lab data ...`: making data for runs.
#include "k3/apps/commands.h"

namespace k3::apps {

void add_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Make data for runs");
  cmd->require_subcommand(1);
  add_data_longctx(*cmd);
}

}  // namespace k3::apps
