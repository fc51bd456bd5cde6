#!/usr/bin/env bash
# Bad configuration or data: one clear error line naming what is wrong, no stack dump.
source "$(dirname "$0")/common.sh"
printf '[train]\nsteps = "many"\n' > "$WORK/typed.toml"
expect_error "train.steps" "$K3LAB" train --config "$WORK/typed.toml"
printf '[train]\nstepz = 3\n' > "$WORK/unknown.toml"
expect_error "train.stepz" "$K3LAB" train --config "$WORK/unknown.toml"
printf '[train\n' > "$WORK/broken.toml"
expect_error "broken.toml" "$K3LAB" train --config "$WORK/broken.toml"
expect_error "missing.toml" "$K3LAB" train --config "$WORK/missing.toml"
expect_error "no-such-corpus.txt" "$K3LAB" train --set data.source="$WORK/no-such-corpus.txt"
: > "$WORK/empty.txt"
expect_error "empty.txt" "$K3LAB" train --set data.source="$WORK/empty.txt" --set run.dir="$WORK/r1"
expect_error "train.lr" "$K3LAB" train --set train.lr=-1
printf '{"vocab_size": 259, "hidden_size": 64}\n' > "$WORK/model.json"
expect_error "model.json.*num_hidden_layers" "$K3LAB" train --set model.config="$WORK/model.json" --set run.dir="$WORK/r2"
expect_error "nothing-here" "$K3LAB" sample --checkpoint "$WORK/nothing-here" --prompt hi
# Pipeline schedules: a bad shape is refused in one line naming what is wrong.
expect_error "needs --kind interleaved" "$K3LAB" schedule pipeline --pp 2 --vp 2 --kind 1f1b
expect_error "--group 3 must lie in" "$K3LAB" schedule pipeline --pp 4 --vp 2 --microbatches 8 --group 3
expect_error "last group holds 1 of 5" "$K3LAB" schedule pipeline --pp 4 --vp 3 --microbatches 5 --group 4
expect_error "unknown pipeline schedule 'pipedream'" "$K3LAB" schedule pipeline --kind pipedream
