// `k3lab selfcheck`: every fast kernel against its reference on random data.
#include "k3/apps/commands.h"
#include "k3/kernels/selfcheck.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/base/error.h"

namespace k3::apps {

void add_selfcheck(CLI::App& app) {
  auto* cmd = app.add_subcommand("selfcheck", "Check every fast kernel against its reference");
  auto seed = std::make_shared<uint64_t>(1);
  cmd->add_option("--seed", *seed, "Seed for the random inputs");
  cmd->callback([seed] {
    int failed = 0;
    for (const auto& r : kernels::run_selfchecks(*seed)) {
      std::printf("%-28s %-4s max error %.3g (tolerance %.3g)\n", r.name.c_str(),
                  r.passed ? "ok" : "FAIL", r.error, r.tolerance);
      failed += !r.passed;
    }
    K3_CHECK(failed == 0, failed, " kernel check(s) failed");
    std::printf("all kernels match their references\n");
  });
}

}  // namespace k3::apps
