"""What the PyTorch cross-check scripts share: the command line, running the driver, the error
measure and the report."""

import argparse
import os
import pathlib
import subprocess

import numpy as np

import st


def parse_args(parser=None):
    """--exe (the driver) and --workdir (a pathlib.Path, created), as ctest passes them; a script
    with flags of its own passes its parser with them added."""
    ap = parser or argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--workdir", required=True, type=pathlib.Path)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    return args


def config_path(name):
    """configs/NAME of the project (K3LAB_ROOT, as ctest sets it, else this checkout)."""
    root = pathlib.Path(os.environ.get("K3LAB_ROOT", pathlib.Path(__file__).resolve().parents[2]))
    return root / "configs" / name


def run_driver(exe, work, inputs, metadata=None):
    """Writes work/inputs.safetensors and runs the driver on work, where it writes its outputs."""
    work.mkdir(parents=True, exist_ok=True)
    st.save(work / "inputs.safetensors", inputs, metadata)
    subprocess.run([exe, str(work)], check=True)


def make_batch(vocab, seed, B, T, ignore_index, drop_fraction):
    """Random tokens [B, T] and their next tokens as targets, the last and about drop_fraction of
    the rest ignored."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(B, T))
    targets = np.roll(tokens, -1, axis=1)
    targets[:, -1] = ignore_index
    targets[rng.random((B, T)) < drop_fraction] = ignore_index
    return tokens, targets


def run_model_driver(exe, work, config, seed, tokens, targets, extra=()):
    """Runs a model driver (driver.h) on a batch, with the driver's own arguments `extra` last:
    returns its results and the path of the weights it initialized from the seed and saved."""
    batch, weights, results = (work / f"{n}.safetensors" for n in ("batch", "weights", "results"))
    st.save(batch, {"tokens": tokens, "targets": targets})
    subprocess.run([exe, str(config), str(seed), str(batch), str(weights), str(results), *extra],
                   check=True)
    return st.load(results), weights


def rel_err(ours, ref):
    """max |k3lab - torch| / max |torch| over a tensor."""
    ref = ref.detach().numpy()
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))


def report(rows, shown=None):
    """Prints the (what, error, tolerance) rows in `shown` (default: all), one line each with ok or
    FAIL; returns whether every row of `rows` is within its tolerance."""
    shown = rows if shown is None else shown
    width = max(len(what) for what, _, _ in shown)
    for what, err, tol in shown:
        print(f"  {what:<{width}}  error {err:.2e}  tolerance {tol:.0e}  {'ok' if err <= tol else 'FAIL'}")
    return all(err <= tol for _, err, tol in rows)


def verdict(ok):
    """Prints PASS or FAIL, the last line; returns the exit status."""
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
