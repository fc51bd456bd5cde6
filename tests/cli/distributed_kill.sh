#!/usr/bin/env bash
# A dp2 × ZeRO-1 Muon run whose rank is killed with SIGKILL at random moments: the job ends
# promptly each time, and the run resumed under the same layout ends bit-identical to one that
# was never interrupted (kill_and_resume_matches in common.sh, with an mpirun launcher).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=1
LAUNCH=(mpirun --allow-run-as-root --oversubscribe -q -np 2)
kill_and_resume_matches 80 --set train.threads=1 --set parallel.dp=2 --set parallel.zero=1
