"""Checks a folder written by `k3lab export` against the checkpoint it came from, in PyTorch:

  export_check.py [FOLDER CHECKPOINT_STEP_DIR fp32|bf16 single|sharded]...

(several folders in one run: importing torch takes longer than the checks).

The safetensors files are parsed here (no safetensors package) into torch tensors of the stored
dtype. Checked: the file layout (one model.safetensors, or shards listed by the index, each tensor
in exactly one file, total_size), every file's {"format": "pt"}, the names and shapes against the
PyTorch reference model built from config.json (loaded by name with load_state_dict, strictly),
the dtypes (bf16 only where the released K3 stores bf16) and the values against the checkpoint's
fp32 weights (equal, or equal to their bf16 rounding).
"""
import json
import pathlib
import struct
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import k3ref  # noqa: E402
import k3torch  # noqa: E402

TORCH_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}
# The tensors the released K3 keeps in fp32: KDA's convolutions, decay parameters and output
# norm, and the router bias.
RELEASE_FP32 = ("conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def read_safetensors(path):
    """({name: torch tensor in the stored dtype}, metadata)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=TORCH_DTYPES[e["dtype"]]) if raw else torch.zeros(0)
        tensors[name] = t.reshape(e["shape"])
    return tensors, metadata


def read_folder(folder, layout):
    """Every tensor of the folder by name, checking the file layout and the index."""
    index_path = folder / "model.safetensors.index.json"
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    if layout == "single":
        if index_path.exists() or shards:
            fail(f"{folder}: expected one model.safetensors, found an index or shards {shards}")
        files = {"model.safetensors": None}
    else:
        if (folder / "model.safetensors").exists() or not index_path.exists():
            fail(f"{folder}: expected shards and an index, without model.safetensors")
        index = json.loads(index_path.read_text())
        files = {}
        for name, file in index["weight_map"].items():
            files.setdefault(file, set()).add(name)
        expected = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
        if len(shards) < 2 or shards != expected or sorted(files) != shards:
            fail(f"{folder}: shards {shards}, the index names {sorted(files)}")
    tensors = {}
    for file, listed in files.items():
        found, metadata = read_safetensors(folder / file)
        if metadata != {"format": "pt"}:
            fail(f"{file}: metadata {metadata}, expected {{'format': 'pt'}}")
        if listed is not None and set(found) != listed:
            fail(f"{file}: holds {sorted(set(found) ^ listed)} contrary to the index")
        twice = tensors.keys() & found.keys()
        if twice:
            fail(f"{file}: tensors in more than one file: {sorted(twice)}")
        tensors.update(found)
    if layout == "sharded":
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        if index["metadata"]["total_size"] != total:
            fail(f"index total_size {index['metadata']['total_size']}, the tensors hold {total} bytes")
    return tensors


def reference_model(config):
    """The PyTorch model of the configuration: the K3 model, or the dense decoder."""
    if config["q_lora_rank"] or config["num_experts"] or config["linear_attn_config"]["num_heads"]:
        return k3torch.K3Model(k3torch.Config(config))
    return k3ref.K3Dense(k3ref.Config(config))


def check(folder, step_dir, dtype, layout):
    config = json.loads((folder / "config.json").read_text())
    want_dtype = {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    if config.get("torch_dtype") != want_dtype or config.get("model_type") != "k3lab":
        fail(f"config.json: torch_dtype {config.get('torch_dtype')}, model_type {config.get('model_type')}")
    tensors = read_folder(folder, layout)

    # Names and shapes: those of the model the configuration describes, both ways.
    model = reference_model(config)
    params = dict(model.named_parameters())
    missing, extra = params.keys() - tensors.keys(), tensors.keys() - params.keys()
    if missing or extra:
        fail(f"missing {sorted(missing)}, unexpected {sorted(extra)}")
    V, d, F, L = (config[k] for k in ("vocab_size", "hidden_size", "moe_intermediate_size",
                                      "routed_expert_hidden_size"))
    expected_shapes = {"model.embed_tokens.weight": [V, d], "lm_head.weight": [V, d]}
    if config["num_experts"]:  # routed experts in their logical (not MXFP4-packed) shapes
        first = config["first_k_dense_replace"]
        expected_shapes[f"model.layers.{first}.block_sparse_moe.experts.0.w1.weight"] = [F, L]
        expected_shapes[f"model.layers.{first}.block_sparse_moe.experts.0.w2.weight"] = [L, F]
    for name, shape in expected_shapes.items():
        if list(tensors[name].shape) != shape:
            fail(f"{name} has shape {list(tensors[name].shape)}, expected {shape}")
    model.load_state_dict({name: t.float() for name, t in tensors.items()}, strict=True)

    trained, _ = read_safetensors(step_dir / "model.safetensors")
    dropped = trained.keys() - tensors.keys()
    bf16 = 0
    for name, t in tensors.items():
        release_fp32 = any(part in name for part in RELEASE_FP32)
        want = torch.bfloat16 if dtype == "bf16" and not release_fp32 else torch.float32
        if t.dtype != want:
            fail(f"{name}: {t.dtype}, expected {want}")
        expected = trained[name].to(want)  # round to nearest even, as the release's conversion
        if not torch.equal(t.view(torch.int16 if want == torch.bfloat16 else torch.int32),
                           expected.view(torch.int16 if want == torch.bfloat16 else torch.int32)):
            fail(f"{name}: values differ from the checkpoint's (max |diff| "
                 f"{float((t.float() - trained[name]).abs().max()):.3g})")
        bf16 += t.dtype == torch.bfloat16
    print(f"ok: {folder.name}: {len(tensors)} tensors ({bf16} bf16), {len(params)} parameters of "
          f"the reference model; left in the checkpoint: {len(dropped)} tensors "
          f"{sorted({name.split('.', 3)[-1] for name in dropped})}")


def main():
    args = sys.argv[1:]
    if not args or len(args) % 4:
        fail(f"expected FOLDER CHECKPOINT_STEP_DIR DTYPE LAYOUT groups, found {args}")
    for i in range(0, len(args), 4):
        check(pathlib.Path(args[i]), pathlib.Path(args[i + 1]), args[i + 2], args[i + 3])


if __name__ == "__main__":
    main()
