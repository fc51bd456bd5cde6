// Choosing a sweep's split (split.h) for "auto" by measuring: a probe is the sweep's largest job
// trained for a few steps by `k3lab train`, as the runner starts its jobs, with evaluation and
// sampling off, in a scratch directory removed afterwards; its pace is read from its metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "k3/sweep/jobs.h"
#include "k3/sweep/split.h"

namespace k3::sweep {

// The tokens per second of each of JOBS probes of JOB run at once, THREADS threads each, over the
// steps after a warm-up step. DIR: their scratch directory (replaced). K3LAB: the binary.
std::vector<double> probe(const Job& job, int64_t jobs, int64_t threads, const std::string& dir,
                          const std::string& k3lab);

std::string split_path(const SweepSpec& spec);  // OUT/NAME.split.json

// The split without probing: spec.parallel x spec.threads as given; for "auto", the one recorded
// in split_path (a key given as a number overrides its side); none when neither.
std::optional<Split> known_split(const SweepSpec& spec);

// The known split, else the candidates on this machine's cores probed on the largest of JOBS,
// the choice recorded in split_path. One line on stderr says what was chosen, and how.
Split settle_split(const SweepSpec& spec, const std::vector<Job>& jobs, const std::string& k3lab);

}  // namespace k3::sweep
