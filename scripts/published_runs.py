#!/usr/bin/env python3
"""Published training runs against the planner (docs/planner.md, "Held against published runs").

Plans every run of configs/published-runs.tsv with `k3lab plan` in its published layout, untuned,
and prints the table: the reported throughput as tokens per GPU-second, the prediction and the
error. --write stores the predictions in the file's last column, which the planner's tests pin.

  python3 scripts/published_runs.py build/release/k3lab [--write]
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "configs" / "published-runs.tsv"


def plan(k3lab, run):
    seq = int(run["seq"])
    cmd = [k3lab, "plan", "--model", str(ROOT / "configs" / run["model"]),
           "--cluster", run["cluster"], "--layout", run["layout"], "--seq", str(seq),
           "--global-batch", str(int(run["global_batch_sequences"]) * seq),
           "--micro-batch", run["micro_batch"], "--gemm", run["gemm"],
           "--schedule", run["schedule"], "--activation", run["activation"],
           "--zero", run["zero"], "--optimizer", "adamw", "--json"]
    if run["ep_overlap"] == "yes":
        cmd.append("--ep-overlap")
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def reported_tokens_per_gpu_second(run, p):
    value, unit = float(run["reported_value"]), run["reported_unit"]
    if unit == "tokens_per_gpu_second":
        return value
    if unit == "tflops_per_gpu":  # through the planner's own FLOPs a token
        return value * 1e12 / (p["model_flops_per_step"] / p["global_batch_tokens"])
    if unit == "gpu_hours_per_trillion_tokens":
        return 1e12 / (value * 3600)
    sys.exit(f"{TABLE}: run {run['run']}: unknown reported_unit '{unit}'")


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["--write"]):
        sys.exit(__doc__)
    k3lab = sys.argv[1]
    with open(TABLE, newline="") as f:
        runs = list(csv.DictReader(f, delimiter="\t"))
    print("| run | GPUs | layout | gemm | reported tok/s/GPU | predicted | error | MFU | fits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        p = plan(k3lab, run)
        gpus = p["gpus"]
        predicted = p["tokens_per_second"] / gpus
        reported = reported_tokens_per_gpu_second(run, p)
        run["predicted_tokens_per_gpu_second"] = f"{predicted:.6g}"
        print(f"| {run['run']} | {gpus} | {run['layout']} | {run['gemm']} | {reported:,.0f} | "
              f"{predicted:,.0f} | {100 * (predicted / reported - 1):+.0f}% | "
              f"{100 * p['mfu']:.1f}% | {'yes' if p['fits'] else 'no'} |")
    if sys.argv[2:] == ["--write"]:
        with open(TABLE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(runs[0].keys()), delimiter="\t",
                               lineterminator="\n")
            w.writeheader()
            w.writerows(runs)


if __name__ == "__main__":
    main()
