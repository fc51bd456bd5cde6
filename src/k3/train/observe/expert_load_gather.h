// Under pipeline parallelism each pp rank balances the MoE layers of its own stages only; the
// run's records must hold every MoE layer, as a one-process run's do.
#pragma once

#include "k3/dist/comm.h"
#include "k3/train/observe/expert_load.h"

namespace k3::train {

// Every pp rank's layers (and, under expert parallelism, their dispatch figures), merged: each
// rank of PP receives the whole record. Collective over PP, so every rank calls it each global
// batch; a group of one returns MINE unchanged.
ExpertLoadRecord gather_expert_load(const dist::Comm& pp, ExpertLoadRecord mine);

}  // namespace k3::train
