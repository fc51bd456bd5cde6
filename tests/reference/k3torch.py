"""The K3 model in PyTorch, with k3lab's (K3's) parameter names, written from docs/math.md
(§2-§5) for cross-checks in float64. Plain and slow: KDA runs its
recurrent form token by token, the MoE loops over experts.

embedding -> N x [AttnRes mix -> RMSNorm -> KDA or gated MLA -> AttnRes mix -> RMSNorm -> dense
SiTU-GLU MLP (layer 0) or Stable LatentMoE] -> AttnRes mix -> RMSNorm -> untied lm_head.
Layouts as in k3lab: a linear layer's weight is [out, in]; every per-head tensor has heads
outermost (column h*D + i is head h, dim i); KDA's conv weights are [P, 1, K].
Decoding (k3ref's make_cache and decode) keeps per KDA layer its convolution windows and
recurrent state, per MLA layer the normalized kv latents and k_r, and attends over them with
kv_b_proj absorbed into the query and output sides (math §4), a path apart from the forward's.
What it shares with the dense model (config loading, RMSNorm, the GLU MLP, causal attention, the
lm_head with its loss, decoding and k3lab weight loading) comes from k3ref.py.
The same model builds the families k3lab reads as released: Llama (k3ref's attention in Llama's
form, dense SwiGLU MLPs) and DeepSeek-V3 (its n_routed_experts.. names read; MLA without the gate,
q_r and k_r turned by rotary embeddings; the standard MoE, the experts on x itself without the
latent projections and norm, as with moe_latent false).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import k3ref
from k3ref import (GatedAttention, GluMlp, LanguageModel, PositionCache, RMSNorm, causal_attention, glu,
                   linear, rope_frequencies, rotate)


class Config(k3ref.Config):
    """k3ref's fields of a JSON config and K3's own: MLA, KDA, LatentMoE, Attention Residuals."""

    def __init__(self, j):
        super().__init__(j)
        j = j.get("text_config", j)
        g = j.get
        self.q_lora_rank = g("q_lora_rank", 0)  # 0: the plain attention
        self.kv_lora_rank = g("kv_lora_rank", 0)
        self.qk_nope_head_dim = g("qk_nope_head_dim", 0)
        self.qk_rope_head_dim = g("qk_rope_head_dim", 0)
        self.v_head_dim = g("v_head_dim", 0)
        la = j.get("linear_attn_config") or {}
        self.kda_heads = la.get("num_heads", 0)
        self.kda_head_dim = la.get("head_dim", 0)
        self.conv_kernel = la.get("short_conv_kernel_size", 4)
        self.gate_lower_bound = la.get("gate_lower_bound", -5.0)
        self.kda_layers = list(la.get("kda_layers", []))  # 1-based
        deepseek = g("model_type") == "deepseek_v3"  # its names, its standard MoE
        self.num_experts = g("n_routed_experts" if deepseek else "num_experts", 0)
        self.top_k = g("num_experts_per_tok" if deepseek else "num_experts_per_token", 0)
        self.moe_intermediate_size = g("moe_intermediate_size", 0)
        self.moe_latent = g("moe_latent", not deepseek)
        self.latent = g("routed_expert_hidden_size", 0) if self.moe_latent else self.hidden_size
        self.num_shared_experts = g("n_shared_experts" if deepseek else "num_shared_experts", 0)
        self.first_k_dense_replace = g("first_k_dense_replace", 0)
        self.routed_scaling_factor = g("routed_scaling_factor", 1.0)
        self.attn_res_block_size = g("attn_res_block_size", 0)


class Weight(nn.Module):
    """A module holding one tensor named `weight` (the AttnRes pseudo-queries and their norms)."""

    def __init__(self, *shape):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*shape))


def attn_res(rows, proj, norm, eps):
    """Agg of math §2: softmax over rows of rho_i <Z_i, norm ⊙ proj>, mixing the raw rows."""
    Z = torch.stack(rows)                                        # [m, ..., d]
    w = norm.weight * proj.weight.reshape(-1)
    rho = torch.rsqrt(Z.pow(2).mean(-1) + eps)                   # [m, ...]
    alpha = torch.softmax(rho * (Z * w).sum(-1), dim=0)
    return (alpha.unsqueeze(-1) * Z).sum(0)


class Expert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.w1, self.w3 = linear(c.latent, c.moe_intermediate_size), linear(c.latent, c.moe_intermediate_size)
        self.w2 = linear(c.moe_intermediate_size, c.latent)

    def forward(self, z):
        return self.w2(glu(self.c, self.w1(z), self.w3(z)))


class Router(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c.num_experts, c.hidden_size))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(c.num_experts))


def select_top_k(s, b, k):
    """ids [rows, k] of the k largest s + b, ties to the lower index; and the margin between the
    k-th and the (k+1)-th key of every row (how far the choice is from flipping)."""
    key = (s + b).detach()
    order = torch.sort(-key, dim=-1, stable=True).indices
    top = torch.gather(key, -1, order[:, : k + 1])
    return order[:, :k], top[:, k - 1] - top[:, k]


class LatentMoE(nn.Module):
    """Stable LatentMoE, or with moe_latent false the standard MoE: z = x and out = r."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c.hidden_size
        self.gate = Router(c)
        if c.moe_latent:
            self.routed_expert_down_proj = linear(d, c.latent)
            self.routed_expert_norm = RMSNorm(c.latent, c.rms_norm_eps)
            self.routed_expert_up_proj = linear(c.latent, d)
        self.experts = nn.ModuleList(Expert(c) for _ in range(c.num_experts))
        self.shared_experts = GluMlp(c, c.num_shared_experts * c.moe_intermediate_size) \
            if c.num_shared_experts > 0 else None
        self.margins = []  # selection margins of every forward (for the report)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        c = self.c
        s = torch.sigmoid(x @ self.gate.weight.t())                          # [n, E]
        ids, margin = select_top_k(s, self.gate.e_score_correction_bias, c.top_k)
        self.margins.append(margin)
        chosen = torch.gather(s, 1, ids)                                       # [n, k]
        p = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) * c.routed_scaling_factor
        z = self.routed_expert_down_proj(x) if c.moe_latent else x
        r = torch.zeros_like(z)
        for e, expert in enumerate(self.experts):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if tok.numel():
                r = r.index_add(0, tok, p[tok, slot].unsqueeze(-1) * expert(z[tok]))
        out = self.routed_expert_up_proj(self.routed_expert_norm(r)) if c.moe_latent else r
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out.reshape(shape)


class GatedMLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, H = c.hidden_size, c.num_attention_heads
        dn, dr, dv = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.q_a_proj = linear(d, c.q_lora_rank)
        self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)
        self.q_b_proj = linear(c.q_lora_rank, H * (dn + dr))
        self.kv_a_proj_with_mqa = linear(d, c.kv_lora_rank + dr)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_norm_eps)
        self.kv_b_proj = linear(c.kv_lora_rank, H * (dn + dv))
        self.g_proj = linear(d, H * dv) if c.output_gate else None
        self.o_proj = linear(H * dv, d)
        self.freqs = rope_frequencies(c, dr) if c.rope else None

    def make_cache(self, batch, max_len, dtype):
        """The normalized kv latents [B, max_len, r_kv] and k_r [B, max_len, d_r]."""
        c = self.c
        shapes = [(batch, max_len, c.kv_lora_rank), (batch, max_len, c.qk_rope_head_dim)]
        return PositionCache(shapes, 1, dtype)

    def forward(self, x, cache=None):
        """x [B, T, d]; with a cache, the T tokens follow the positions it holds, and join them."""
        c = self.c
        B, T, _ = x.shape
        H, dn, dr, dv = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, H, dn + dr)
        ckv, k_r = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, dr], dim=-1)
        latent = self.kv_a_layernorm(ckv)
        if self.freqs is not None:  # q_r of every head and the shared k_r, at their positions
            start = 0 if cache is None else cache.length
            q_r = rotate(q[..., dn:].transpose(1, 2), self.freqs, start).transpose(1, 2)
            q = torch.cat([q[..., :dn], q_r], dim=-1)
            k_r = rotate(k_r, self.freqs, start)
        if cache is not None:
            o = self.absorbed(q, *cache.append(latent, k_r))
        else:
            k_n, v = self.kv_b_proj(latent).view(B, T, H, dn + dv).split([dn, dv], dim=-1)
            k = torch.cat([k_n, k_r.unsqueeze(2).expand(B, T, H, dr)], dim=-1)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))                # [B, H, T, .]
            o = causal_attention((q @ k.transpose(-1, -2)) / math.sqrt(dn + dr), v)
        return self.o_proj(o if self.g_proj is None else o * torch.sigmoid(self.g_proj(x)))

    def absorbed(self, q, held, start):
        """Attention of queries q [B, T, H, d_n + d_r] at positions start.. over the cached
        latents and k_r (`held`, [B, start + T, .]) without per-head keys or values:
        q_n·k_n,s = (W_kb,hᵀ q_n)·c_s and Σ_s α_s v_s = W_vb,h Σ_s α_s c_s -> [B, T, H d_v]."""
        c = self.c
        B, T, H, _ = q.shape
        dn, dv = c.qk_nope_head_dim, c.v_head_dim
        latents, k_r = held
        w = self.kv_b_proj.weight.view(H, dn + dv, c.kv_lora_rank)
        q_c = torch.einsum("bthn,hnr->bhtr", q[..., :dn], w[:, :dn])      # [B, H, T, r_kv]
        scores = (q_c @ latents.transpose(1, 2).unsqueeze(1)
                  + q[..., dn:].transpose(1, 2) @ k_r.transpose(1, 2).unsqueeze(1))
        scores = scores / math.sqrt(dn + c.qk_rope_head_dim)
        mixed = causal_attention(scores, latents.unsqueeze(1), start).view(B, T, H, -1)
        return torch.einsum("bthr,hvr->bthv", mixed, w[:, dn:]).reshape(B, T, H * dv)


class KdaState:
    """A KDA layer's decoding state: the last K_c - 1 inputs of each short conv (by name; zeros
    before a sequence's first token) and the delta-rule state S [B, H, D, D] (zero at first)."""

    def __init__(self):
        self.windows, self.S = {}, None


class KDA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, H, D, K = c.hidden_size, c.kda_heads, c.kda_head_dim, c.conv_kernel
        P = H * D
        self.q_proj, self.k_proj, self.v_proj = linear(d, P), linear(d, P), linear(d, P)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = Weight(P, 1, K), Weight(P, 1, K), Weight(P, 1, K)
        self.f_a_proj, self.f_b_proj = linear(d, D), linear(D, P)
        self.b_proj = linear(d, H)
        self.A_log = nn.Parameter(torch.zeros(H))
        self.dt_bias = nn.Parameter(torch.zeros(P))
        self.o_norm = RMSNorm(D, c.rms_norm_eps)
        self.g_proj = linear(d, P)
        self.o_proj = linear(P, d)

    def make_cache(self, batch, max_len, dtype):
        """A KdaState: its size does not grow with the context."""
        return KdaState()

    @staticmethod
    def conv(x, w, state, name):
        """Causal depthwise conv + SiLU: y[t,c] = silu(Σ_j w[c,0,j] x[t-(K-1)+j, c]); x [B, T, P]
        continues the window state.windows[name], which it then advances."""
        B, T, P = x.shape
        K = w.weight.shape[-1]
        window = state.windows.get(name)
        x = torch.cat([x.new_zeros(B, K - 1, P) if window is None else window, x], dim=1)
        state.windows[name] = x[:, T:]
        return F.silu(F.conv1d(x.transpose(1, 2), w.weight, groups=P).transpose(1, 2))

    def forward(self, x, cache=None):
        """x [B, T, d]; with a cache (a KdaState) the T tokens continue from it, and advance it."""
        c = self.c
        B, T, _ = x.shape
        H, D = c.kda_heads, c.kda_head_dim
        state = KdaState() if cache is None else cache

        def heads(t):
            return t.view(B, T, H, D)

        q = heads(self.conv(self.q_proj(x), self.q_conv1d, state, "q"))
        k = heads(self.conv(self.k_proj(x), self.k_conv1d, state, "k"))
        v = heads(self.conv(self.v_proj(x), self.v_conv1d, state, "v"))
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(D)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        f = heads(self.f_b_proj(self.f_a_proj(x)))
        g = c.gate_lower_bound * torch.sigmoid(
            torch.exp(self.A_log).view(H, 1) * (f + self.dt_bias.view(H, D)))   # [B, T, H, D]
        beta = torch.sigmoid(self.b_proj(x))                                     # [B, T, H]
        S = x.new_zeros(B, H, D, D) if state.S is None else state.S
        outs = []
        for t in range(T):
            S = S * torch.exp(g[:, t]).unsqueeze(-1)                            # Diag(e^g) S
            u = v[:, t] - (S * k[:, t].unsqueeze(-1)).sum(-2)                    # v - Sᵀk
            S = S + beta[:, t, :, None, None] * k[:, t].unsqueeze(-1) * u.unsqueeze(-2)
            outs.append((S * q[:, t].unsqueeze(-1)).sum(-2))                     # Sᵀq
        state.S = S
        o = torch.stack(outs, dim=1)                                             # [B, T, H, D]
        y = self.o_norm(o) * torch.sigmoid(heads(self.g_proj(x)))
        return self.o_proj(y.reshape(B, T, H * D))


class DecoderLayer(nn.Module):
    def __init__(self, c, index):
        super().__init__()
        d = c.hidden_size
        self.index = index
        self.input_layernorm = RMSNorm(d, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d, c.rms_norm_eps)
        if c.attn_res_block_size > 0:
            self.self_attention_res_proj, self.self_attention_res_norm = Weight(1, d), Weight(d)
            self.mlp_res_proj, self.mlp_res_norm = Weight(1, d), Weight(d)
        if index + 1 in c.kda_layers:
            self.self_attn = KDA(c)
        else:
            self.self_attn = GatedMLA(c) if c.q_lora_rank > 0 else GatedAttention(c)
        if c.num_experts > 0 and index >= c.first_k_dense_replace:
            self.block_sparse_moe = LatentMoE(c)
        else:
            self.mlp = GluMlp(c, c.intermediate_size)

    def ffn(self, x):
        return self.mlp(x) if hasattr(self, "mlp") else self.block_sparse_moe(x)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, l) for l in range(c.num_hidden_layers))
        if c.attn_res_block_size > 0:
            self.output_attn_res_proj, self.output_attn_res_norm = Weight(1, c.hidden_size), Weight(c.hidden_size)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, tokens, cache=None):
        c, eps = self.c, self.c.rms_norm_eps
        P = self.embed_tokens(tokens)
        caches = [None] * len(self.layers) if cache is None else cache
        if c.attn_res_block_size <= 0:  # ordinary residual stream
            for L, layer_cache in zip(self.layers, caches):
                P = P + L.self_attn(L.input_layernorm(P), layer_cache)
                P = P + L.ffn(L.post_attention_layernorm(P))
            return self.norm(P)
        bank = []
        for L, layer_cache in zip(self.layers, caches):
            if bank:
                a_in = L.input_layernorm(attn_res(bank + [P], L.self_attention_res_proj,
                                                  L.self_attention_res_norm, eps))
            else:  # layer 0: its self_attention_res_* have no effect
                a_in = L.input_layernorm(P)
            starts_block = L.index % c.attn_res_block_size == 0
            if starts_block:
                bank.append(P)
            A = L.self_attn(a_in, layer_cache)
            P = A if starts_block else P + A
            m_in = L.post_attention_layernorm(attn_res(bank + [P], L.mlp_res_proj, L.mlp_res_norm, eps))
            P = P + L.ffn(m_in)
        h = attn_res(bank + [P], self.output_attn_res_proj, self.output_attn_res_norm, eps)
        return self.norm(h)


class K3Model(LanguageModel):
    def __init__(self, c):
        super().__init__(c, Decoder(c))

    def moe_margins(self):
        """Every top-k selection margin of the forwards so far (one per MoE layer and token)."""
        m = [x for mod in self.modules() if isinstance(mod, LatentMoE) for x in mod.margins]
        return torch.cat(m) if m else torch.zeros(0)
