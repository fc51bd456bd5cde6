"""The k3lab dense decoder in PyTorch, with k3lab's (K3's) parameter names.

embedding -> N x [RMSNorm -> gated attention -> RMSNorm -> GLU MLP] -> RMSNorm -> untied lm_head.
Gated attention is causal softmax attention without positional encoding,
out = o_proj(attn(q, k, v) * sigmoid(g_proj x)), heads innermost: column h*D+i of a projection's
output is head h, dim i. Llama's form of it (model_type "llama") has no gate, turns q and k by
rotary embeddings (Hugging Face's rotate_half pairing, Llama 3's scaled frequencies) and shares
each head of keys and values among num_attention_heads / num_key_value_heads query heads.
The loss is a SUM of token cross-entropies, as k3lab returns it.
Decoding feeds tokens a piece at a time (a prompt, then one token per step) through per-layer
caches (make_cache, decode): here each attention layer's keys and values.
k3torch.py builds the K3 model on the pieces here that both share.
"""
import json
import math

import torch
import torch.nn.functional as F
from torch import nn

import st

IGNORE_INDEX = -100


class Config:
    """The fields of an HF-style JSON config (flat, or K3's nesting under "text_config")."""

    def __init__(self, j):
        j = j.get("text_config", j)
        self.vocab_size = j["vocab_size"]
        self.hidden_size = j["hidden_size"]
        self.num_hidden_layers = j["num_hidden_layers"]
        self.num_attention_heads = j["num_attention_heads"]
        self.head_dim = j.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.intermediate_size = j["intermediate_size"]
        self.situ_beta = j.get("activation_situ_beta", 4.0)
        self.situ_linear_beta = j.get("activation_situ_linear_beta", 25.0)
        self.rms_norm_eps = j.get("rms_norm_eps", 1e-5)
        self.initializer_range = j.get("initializer_range", 0.02)
        self.num_key_value_heads = j.get("num_key_value_heads") or self.num_attention_heads
        # Llama and DeepSeek-V3 attend with rotary embeddings and no output gate, through SiLU.
        family = j.get("model_type") in ("llama", "deepseek_v3")
        self.hidden_act = j.get("hidden_act", "silu" if family else "situ")
        self.rope = not j.get("mla_use_nope", not family)
        self.output_gate = j.get("mla_use_output_gate", not family)
        self.rope_theta = j.get("rope_theta", 10000.0)
        self.rope_scaling = j.get("rope_scaling") or {}

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls(json.load(f))


def linear(i, o):
    return nn.Linear(i, o, bias=False)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def causal_attention(scores, v, start=0):
    """softmax(scores) @ v, query t (at position start + t) over the keys s <= start + t:
    scores [B, H, T, start + T], v [B, H or 1, start + T, D] -> [B, T, H*D]."""
    B, H, T, _ = scores.shape
    if T > 1:  # a single query sees every key
        future = torch.ones(T, start + T, dtype=torch.bool, device=v.device).triu(start + 1)
        scores = scores.masked_fill(future, float("-inf"))
    out = scores.softmax(-1) @ v
    return out.transpose(1, 2).reshape(B, T, H * v.shape[-1])


def rope_frequencies(c, d):
    """θ^(-2i/d) for i < d/2, in float64; with rope_scaling "llama3" those of wavelengths above
    original / low_freq_factor divided by factor, below original / high_freq_factor kept, and
    between them interpolated from one to the other."""
    f = c.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    s = c.rope_scaling
    if s.get("rope_type", s.get("type")) != "llama3":
        return f
    original, factor = s["original_max_position_embeddings"], s["factor"]
    low, high = s["low_freq_factor"], s["high_freq_factor"]
    wavelength = 2 * math.pi / f
    smooth = (original / wavelength - low) / (high - low)
    between = (1 - smooth) * f / factor + smooth * f
    return torch.where(wavelength > original / low, f / factor,
                       torch.where(wavelength < original / high, f, between))


def rotate(x, freqs, start=0):
    """x [..., T, d] at positions start..start+T-1 turned: x cos + rotate_half(x) sin, where
    rotate_half(x) = [-x2, x1] for the halves x1, x2 of the last dimension."""
    T, d = x.shape[-2], x.shape[-1]
    angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * freqs[None, :]
    cos, sin = (torch.cat([a, a], dim=-1).to(x.dtype) for a in (angles.cos(), angles.sin()))
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1) * sin


class PositionCache:
    """What an attention layer keeps of `batch` sequences while decoding: tensors that grow along
    dimension `dim` (the position), allocated for max_len positions, and how many they hold."""

    def __init__(self, shapes, dim, dtype):
        self.tensors = [torch.zeros(shape, dtype=dtype) for shape in shapes]
        self.dim, self.length = dim, 0

    def append(self, *parts):
        """Writes each part at the next positions; returns every position held so far of each
        tensor, and the first new position."""
        start, T = self.length, parts[0].shape[self.dim]
        for t, part in zip(self.tensors, parts):
            t.narrow(self.dim, start, T).copy_(part)
        self.length += T
        return [t.narrow(self.dim, 0, self.length) for t in self.tensors], start


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, p = c.hidden_size, c.num_attention_heads * c.head_dim
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = linear(d, p)
        self.k_proj, self.v_proj = linear(d, self.kv_heads * c.head_dim), linear(d, self.kv_heads * c.head_dim)
        self.g_proj = linear(d, p) if c.output_gate else None
        self.o_proj = linear(p, d)
        self.freqs = rope_frequencies(c, c.head_dim) if c.rope else None

    def make_cache(self, batch, max_len, dtype):
        """Keys (turned) and values [B, kv heads, max_len, D]."""
        shape = (batch, self.kv_heads, max_len, self.head_dim)
        return PositionCache([shape, shape], 2, dtype)

    def forward(self, x, cache=None):
        """x [B, T, d]; with a cache, the T tokens follow the positions it holds, and join them."""
        B, T, _ = x.shape
        # [B, T, heads*D] -> [B, heads, T, D]
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k, v = (f(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
                for f in (self.k_proj, self.v_proj))
        start = 0 if cache is None else cache.length
        if self.freqs is not None:
            q, k = rotate(q, self.freqs, start), rotate(k, self.freqs, start)
        if cache is not None:
            (k, v), start = cache.append(k, v)
        group = self.heads // self.kv_heads  # query heads h*group.. share key-value head h
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        o = causal_attention(scores, v, start)
        return self.o_proj(o if self.g_proj is None else o * torch.sigmoid(self.g_proj(x)))


def glu(c, g, u):
    if c.hidden_act == "silu":
        return F.silu(g) * u
    b1, b2 = c.situ_beta, c.situ_linear_beta  # SiTU-GLU: [b1 tanh(g/b1) sigmoid(g)] * [b2 tanh(u/b2)]
    return b1 * torch.tanh(g / b1) * torch.sigmoid(g) * (b2 * torch.tanh(u / b2))


class GluMlp(nn.Module):
    def __init__(self, c, width):
        super().__init__()
        self.c = c
        self.gate_proj, self.up_proj = linear(c.hidden_size, width), linear(c.hidden_size, width)
        self.down_proj = linear(width, c.hidden_size)

    def forward(self, x):
        return self.down_proj(glu(self.c, self.gate_proj(x), self.up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = GatedAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GluMlp(c, c.intermediate_size)

    def forward(self, x, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, tokens, cache=None):
        x = self.embed_tokens(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if cache is None else cache[i])
        return self.norm(x)


class LanguageModel(nn.Module):
    """decoder -> untied lm_head, with k3lab's summed loss and its weight files (K3Dense here,
    K3Model in k3torch.py)."""

    def __init__(self, c, decoder):
        super().__init__()
        self.config = c
        self.model = decoder
        self.lm_head = linear(c.hidden_size, c.vocab_size)

    def forward(self, tokens):
        return self.lm_head(self.model(tokens))

    def make_cache(self, batch, max_len, dtype=None):
        """Empty decoding caches of `batch` sequences of up to max_len tokens, one per layer: its
        sequence mixer's. dtype: of the attention caches (default: the parameters')."""
        dtype = dtype or self.lm_head.weight.dtype
        return [layer.self_attn.make_cache(batch, max_len, dtype) for layer in self.model.layers]

    def decode(self, tokens, cache):
        """Feeds tokens [B, T] at the positions after those the cache holds, adding them to it:
        the logits of the last [B, V]."""
        return self.lm_head(self.model(tokens, cache)[:, -1])

    def loss(self, tokens, targets):
        """(sum of token losses over targets != IGNORE_INDEX, count of those targets)."""
        logits = self(tokens)
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                ignore_index=IGNORE_INDEX, reduction="sum")
        return total, int((targets != IGNORE_INDEX).sum())

    def init_normal(self, seed):
        """Matrices N(0, initializer_range^2), the rest as built (for timing; tests load k3lab's)."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * self.config.initializer_range)

    def load_k3lab(self, path):
        """Loads a k3lab safetensors weight file; every name and shape must match both ways."""
        weights = st.load(path)
        params = dict(self.named_parameters())
        missing, extra = params.keys() - weights.keys(), weights.keys() - params.keys()
        if missing or extra:
            raise ValueError(f"{path}: missing {sorted(missing)}, unexpected {sorted(extra)}")
        with torch.no_grad():
            for name, p in params.items():
                if tuple(p.shape) != weights[name].shape:
                    raise ValueError(f"{path}: {name} has shape {weights[name].shape}, "
                                     f"expected {tuple(p.shape)}")
                p.copy_(torch.from_numpy(weights[name]))


class K3Dense(LanguageModel):
    def __init__(self, c):
        super().__init__(c, Decoder(c))


def decay_groups(model, weight_decay):
    """AdamW groups as k3lab's decays_by_default: matrices decay, except embeddings."""
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed_tokens" not in name else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
