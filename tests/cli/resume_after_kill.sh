#!/usr/bin/env bash
# The dense model killed with SIGKILL at random moments, then resumed, ends bit-identical to a run
# that was never interrupted (kill_and_resume_matches in common.sh).
source "$(dirname "$0")/common.sh"
kill_and_resume_matches 60
