#!/usr/bin/env bash
# `k3lab op`: the chunked and the recurrent delta rule agree (outputs, final state, every input
# gradient; fast decays, and slow ones over several full chunks), the gate and the short
# convolution match numpy, and bad inputs are refused with one line naming the file and the tensor.
source "$(dirname "$0")/common.sh"
export PYTHONPATH="$ROOT/tests/reference"

/usr/bin/python3 - "$WORK" <<'PY'
import sys
import numpy as np
import st

w = sys.argv[1]
rng = np.random.default_rng(3)
B, H, K, V = 2, 2, 16, 8
def unit(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)
def slow(shape):  # log-uniform in [-0.1, -0.01]: a freshly initialized layer's decays
    return -(10.0 ** (-1 - rng.random(shape)))
def delta_rule(name, T, g):
    """Writes the inputs NAME.safetensors and the output gradients NAME_grads.safetensors."""
    x = {
        "q": unit(rng.standard_normal((B, T, H, K))),
        "k": unit(rng.standard_normal((B, T, H, K))),
        "v": rng.standard_normal((B, T, H, V)),
        "g": g((B, T, H, K)),
        "beta": 1 / (1 + np.exp(-rng.standard_normal((B, T, H)))),
        "initial_state": 0.3 * rng.standard_normal((B, H, K, V)),
    }
    st.save(f"{w}/{name}.safetensors", x, {"scale": 0.25})
    st.save(f"{w}/{name}_grads.safetensors", {"dout": rng.standard_normal((B, T, H, V)),
                                               "dfinal_state": rng.standard_normal((B, H, K, V))})
    return x
def at_bound(shape):  # even channels at the bound -5, the others slow
    g = slow(shape)
    g[..., ::2] = -5.0
    return g
# The bounded gate's typical decays (-2.5 per token on average) over one chunk and a bit; slow decays
# over four full chunks and a partial one, and over exactly four, so that the state handed from
# chunk to chunk keeps its weight.
dr = delta_rule("dr", 70, lambda shape: -5 / (1 + np.exp(-rng.standard_normal(shape))))
delta_rule("dr_slow", 4 * 64 + 17, slow)
delta_rule("dr_bound", 4 * 64, at_bound)
st.save(f"{w}/gate.safetensors", {"f": 3 * rng.standard_normal((10, H, K)),
                                   "A_log": rng.standard_normal(H),
                                   "dt_bias": rng.standard_normal(H * K)}, {"lower_bound": -5})
st.save(f"{w}/gate_grads.safetensors", {"dg": rng.standard_normal((10, H, K))})
st.save(f"{w}/conv.safetensors", {"x": rng.standard_normal((B, 9, 5)),
                                   "weight": rng.standard_normal((5, 1, 4)),
                                   "window": rng.standard_normal((B, 3, 5))})
# Bad inputs: a missing tensor, a wrong shape, a non-finite value, a positive log-decay, a stray name.
bad = {
    "missing": {n: a for n, a in dr.items() if n != "k"},
    "shape": {**dr, "beta": dr["beta"][:, :, :1]},
    "nan": {**dr, "v": np.where(np.arange(dr["v"].size).reshape(dr["v"].shape) == 3, np.nan, dr["v"])},
    "decay": {**dr, "g": -dr["g"]},
    "stray": {**dr, "gg": dr["g"]},
}
for name, tensors in bad.items():
    st.save(f"{w}/bad_{name}.safetensors", tensors)
st.save(f"{w}/no_grads.safetensors", {})
PY

for set in dr dr_slow dr_bound; do
  for op in kda-chunk kda-recurrent; do
    "$K3LAB" op $op --inputs "$WORK/$set.safetensors" --grads "$WORK/${set}_grads.safetensors" \
      --out "$WORK/${set}_$op.safetensors"
  done
done
"$K3LAB" op kda-gate --inputs "$WORK/gate.safetensors" --grads "$WORK/gate_grads.safetensors" --out "$WORK/gate_out.safetensors"
"$K3LAB" op short-conv --inputs "$WORK/conv.safetensors" --out "$WORK/conv_out.safetensors"

/usr/bin/python3 - "$WORK" <<'PY'
import sys
import numpy as np
import st

w = sys.argv[1]
def check(what, ours, want, tol):
    err = np.abs(ours - want).max() / max(np.abs(want).max(), 1e-30)
    print(f"{what:40s} error {err:.1e}")
    if not err <= tol:
        sys.exit(f"FAIL: {what} error {err} > {tol}")

# Both fp32: the recurrent form's rounding over the sequence and the chunked form's over a chunk's
# products and the carried state measure at most 2e-6 of the largest entry (the slow decays' four
# chunks: 1e-6); an error in the decay of the carried state shows at ~1e-3.
for set in ("dr", "dr_slow", "dr_bound"):
    chunk, rec = (st.load(f"{w}/{set}_kda-{op}.safetensors") for op in ("chunk", "recurrent"))
    assert sorted(chunk) == sorted(rec) == sorted(
        ["out", "final_state", "dq", "dk", "dv", "dg", "dbeta", "dinitial_state"]), sorted(chunk)
    for n in chunk:
        check(f"{set} chunk vs recurrent {n}", chunk[n], rec[n], 1e-4)

x, g = st.load(f"{w}/gate.safetensors"), st.load(f"{w}/gate_out.safetensors")
dg = st.load(f"{w}/gate_grads.safetensors")["dg"].astype(np.float64)
H, D = x["f"].shape[1:]
a = np.exp(x["A_log"].astype(np.float64))[None, :, None]
u = a * (x["f"] + x["dt_bias"].reshape(H, D))
s = 1 / (1 + np.exp(-u))
check("gate g", g["g"], -5 * s, 1e-5)
du = dg * -5 * s * (1 - s)
check("gate df", g["df"], du * a, 1e-5)
check("gate dA_log", g["dA_log"], (du * u).sum(axis=(0, 2)), 1e-5)
check("gate ddt_bias", g["ddt_bias"], (du * a).sum(axis=0).reshape(-1), 1e-5)

c, y = st.load(f"{w}/conv.safetensors"), st.load(f"{w}/conv_out.safetensors")
ext = np.concatenate([c["window"], c["x"]], axis=1).astype(np.float64)
Kc = c["weight"].shape[2]
z = sum(c["weight"][None, None, :, 0, j] * ext[:, j:j + c["x"].shape[1]] for j in range(Kc))
check("short-conv y", y["y"], z / (1 + np.exp(-z)), 1e-5)
check("short-conv window", y["window"], ext[:, -(Kc - 1):], 0)
PY

expect_error "bad_missing.safetensors, field k: tensor is missing" \
  "$K3LAB" op kda-chunk --inputs "$WORK/bad_missing.safetensors" --out "$WORK/x.safetensors"
expect_error "field beta: expected shape \[2, 70, 2\], found \[2, 70, 1\]" \
  "$K3LAB" op kda-recurrent --inputs "$WORK/bad_shape.safetensors" --out "$WORK/x.safetensors"
expect_error "field v: element 3 is not finite" \
  "$K3LAB" op kda-chunk --inputs "$WORK/bad_nan.safetensors" --out "$WORK/x.safetensors"
expect_error "field g: log-decays must be <= 0" \
  "$K3LAB" op kda-chunk --inputs "$WORK/bad_decay.safetensors" --out "$WORK/x.safetensors"
expect_error "field gg: unexpected tensor" \
  "$K3LAB" op kda-chunk --inputs "$WORK/bad_stray.safetensors" --out "$WORK/x.safetensors"
expect_error "field dout: expected dout and/or dfinal_state" \
  "$K3LAB" op kda-chunk --inputs "$WORK/dr.safetensors" --grads "$WORK/no_grads.safetensors" --out "$WORK/x.safetensors"
expect_error "field dg: unexpected tensor: expected only dout, dfinal_state" \
  "$K3LAB" op kda-chunk --inputs "$WORK/dr.safetensors" --grads "$WORK/gate_grads.safetensors" --out "$WORK/x.safetensors"
expect_error "no-such-file" "$K3LAB" op short-conv --inputs "$WORK/no-such-file" --out "$WORK/x.safetensors"
[ ! -e "$WORK/x.safetensors" ] || fail "a refused operation wrote its output"
echo "PASS"
