"""The vision tower and projector (k3lab, fp32) against PyTorch in float64, written from the
K3 layout of the tensors: the patch embedding as a stride-p convolution with weight [D, 3, p, p],
the position table [g, g, D] added per patch, blocks of pre-norm attention over all of an image's
patches (wqkv rows [q | k | v], heads of qkv_hidden_size / heads) and a fc0 / tanh-GELU / fc1 MLP,
the final norm, each 2x2 block of patches concatenated in (row, column) order, then
post_norm(proj.2(gelu(proj.0(.)))). Compared: the output and the gradient of <out, dout> for
every parameter, on k3-nano-vision and k3-micro-vision."""
import json
import math
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

import harness
import st
from harness import rel_err

# Errors are max |k3lab - torch| / max |torch| over a tensor; measured below 1e-6 (fp32 sums of a
# few hundred terms).
TOL = 2e-5


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def tower(p, images, cfg):
    vc = cfg["vision_config"]
    D, H, Q = vc["vt_hidden_size"], vc["vt_num_attention_heads"], vc["qkv_hidden_size"]
    patch, eps = vc["patch_size"], cfg["rms_norm_eps"]
    n = images.shape[0]
    x = F.conv2d(images, p["vision_tower.patch_embed.proj.weight"], stride=patch)  # [n, D, g, g]
    g = x.shape[-1]
    x = x.permute(0, 2, 3, 1) + p["vision_tower.patch_embed.pos_emb.weight"]  # [n, g, g, D]
    x = x.reshape(n, g * g, D)
    for b in range(vc["vt_num_hidden_layers"]):
        w = lambda name: p[f"vision_tower.encoder.blocks.{b}.{name}.weight"]
        qkv = rms_norm(x, w("norm0"), eps) @ w("wqkv").T
        q, k, v = (t.reshape(n, g * g, H, Q // H).transpose(1, 2) for t in qkv.split(Q, dim=-1))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(Q // H), dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(n, g * g, Q) @ w("wo").T
        h = F.gelu(rms_norm(x, w("norm1"), eps) @ w("mlp.fc0").T, approximate="tanh")
        x = x + h @ w("mlp.fc1").T
    x = rms_norm(x, p["vision_tower.encoder.final_layernorm.weight"], eps)
    # [n, g, g, D] -> [n, g/2, 2, g/2, 2, D] -> [n, g/2, g/2, 2, 2, D]: each block's four patches
    x = x.reshape(n, g // 2, 2, g // 2, 2, D).permute(0, 1, 3, 2, 4, 5).reshape(n * (g // 2) ** 2, 4 * D)
    h = F.gelu(x @ p["mm_projector.proj.0.weight"].T)
    h = h @ p["mm_projector.proj.2.weight"].T
    return rms_norm(h, p["mm_projector.post_norm.weight"], vc.get("projector_ln_eps", 1e-5))


def check(exe, work, config_name, n):
    cfg_path = harness.config_path(config_name)
    cfg = json.loads(cfg_path.read_text())
    vc = cfg["vision_config"]
    S, tokens = vc["image_size"], (vc["image_size"] // vc["patch_size"]) ** 2 // 4
    rng = np.random.default_rng(3)
    x = {"images": rng.random((n, 3, S, S)).astype(np.float32),
         "dout": rng.standard_normal((n * tokens, cfg["hidden_size"])).astype(np.float32)}
    work.mkdir(parents=True, exist_ok=True)
    st.save(work / "inputs.safetensors", x)
    subprocess.run([exe, str(cfg_path), str(work)], check=True)
    ours = st.load(work / "outputs.safetensors")
    p = {name: torch.from_numpy(a).double().requires_grad_() for name, a in
         st.load(work / "weights.safetensors").items()}
    out = tower(p, torch.from_numpy(x["images"]).double(), cfg)
    (out * torch.from_numpy(x["dout"]).double()).sum().backward()
    rows = [("out", rel_err(ours["out"], out), TOL)]
    rows += [("grad." + name, rel_err(ours["grad." + name], t.grad), TOL) for name, t in p.items()]
    print(f"{config_name}: {n} images of {S}x{S}, {len(p)} tensors")
    return harness.report(rows)


def main():
    args = harness.parse_args()
    return harness.verdict(all([check(args.exe, args.workdir / "nano", "k3-nano-vision.json", 3),
                                check(args.exe, args.workdir / "micro", "k3-micro-vision.json", 2)]))


if __name__ == "__main__":
    sys.exit(main())
