#!/usr/bin/python3
"""The scaling-law fit of `k3lab fit` done with scipy's L-BFGS-B: the same objective (sum of Huber
of LSE(a - alpha log N, b - beta log D, e) - log L), its analytic gradient, the same start grid
(Chinchilla's 4,500 starts), the best start kept (ties by start index). Prints one JSON object.

    /usr/bin/python3 bench/fit_vs_scipy.py DATA.csv --params COL --tokens COL --loss COL
        [--where COL=VALUE ...] [--huber-delta 1e-3] [--grid alpha=0:2:0.5,...]
"""
import argparse
import csv
import itertools
import json
import time

import numpy as np
from scipy.optimize import minimize

NAMES = ["a", "b", "e", "alpha", "beta"]


def chinchilla_grid():
    return {"a": np.arange(0, 26, 5.0), "b": np.arange(0, 26, 5.0), "e": np.arange(-1, 1.01, 0.5),
            "alpha": np.arange(0, 2.01, 0.5), "beta": np.arange(0, 2.01, 0.5)}


def override(grid, spec):
    for part in filter(None, spec.split(",")):
        name, value = part.split("=")
        r = [float(v) for v in value.split(":")]
        grid[name] = np.array(r) if len(r) == 1 else np.arange(r[0], r[1] + 1e-9 * r[2], r[2])
    return grid


def objective(theta, log_n, log_d, log_l, delta):
    a, b, e, alpha, beta = theta
    t = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])
    m = t.max(axis=0)
    w = np.exp(t - m)
    s = w.sum(axis=0)
    w /= s
    r = m + np.log(s) - log_l
    absr = np.abs(r)
    f = np.where(absr <= delta, 0.5 * r * r, delta * (absr - 0.5 * delta)).sum()
    dr = np.clip(r, -delta, delta)
    g = np.array([(dr * w[0]).sum(), (dr * w[1]).sum(), (dr * w[2]).sum(),
                  -(dr * w[0] * log_n).sum(), -(dr * w[1] * log_d).sum()])
    return f, g


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--params", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--loss", required=True)
    p.add_argument("--where", action="append", default=[])
    p.add_argument("--huber-delta", type=float, default=1e-3)
    p.add_argument("--grid", default="")
    args = p.parse_args()
    where = [w.split("=", 1) for w in args.where]
    n, d, loss = [], [], []
    with open(args.data) as f:
        for row in csv.DictReader(f):
            if all(row[k] == v for k, v in where):
                n.append(float(row[args.params]))
                d.append(float(row[args.tokens]))
                loss.append(float(row[args.loss]))
    log_n, log_d, log_l = np.log(n), np.log(d), np.log(loss)
    grid = override(chinchilla_grid(), args.grid)
    begin = time.perf_counter()
    best, starts = None, 0
    for start in itertools.product(*(grid[k] for k in NAMES)):
        r = minimize(objective, np.array(start), args=(log_n, log_d, log_l, args.huber_delta),
                     jac=True, method="L-BFGS-B")
        if np.isfinite(r.fun) and (best is None or r.fun < best[0]):
            best = (r.fun, r.x)
        starts += 1
    seconds = time.perf_counter() - begin
    a, b, e, alpha, beta = best[1]
    print(json.dumps({"E": np.exp(e), "A": np.exp(a), "B": np.exp(b), "alpha": alpha, "beta": beta,
                      "objective": best[0], "starts": starts, "seconds": seconds,
                      "points": len(loss)}))


if __name__ == "__main__":
    main()
