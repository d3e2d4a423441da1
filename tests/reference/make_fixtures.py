#!/usr/bin/env python3
"""make_fixtures.py — independent PyTorch reference for Hyperion's whole-model tests.

Writes tests/fixtures/ref_gpt2_tiny.safetensors and tests/fixtures/ref_llama_tiny.safetensors
(and the GPT-2 variants ref_gpt2_qknorm_tiny / ref_gpt2_rmsnorm_tiny / ref_gpt2_postln_tiny /
ref_gpt2_sandwich_tiny / ref_gpt2_deepnorm_tiny, see GPT2_QKNORM below):
fixed seeded weights, one fixed batch, the logits, the loss, the gradient of every parameter, and
the losses / global gradient norms of 10 AdamW steps on that batch. CI never runs this script;
the fixtures it wrote are committed. Re-run:

    python3 tests/reference/make_fixtures.py            # from the repo root
    python3 tests/reference/make_fixtures.py --only gpt2_qknorm_tiny   # just that file
    python3 tests/reference/make_fixtures.py --only gpt2_lion_tiny     # v2134 Lion's 10 steps
    python3 tests/reference/make_fixtures.py --check    # also compare with Hugging Face
                                                        # transformers' GPT2 / Qwen3 (if installed)

Needs torch (CPU is enough: `pip install torch` from PyPI; this script runs that for you if torch
is missing). No numpy, no safetensors package: the files are written by hand below.

The models are written out explicitly in torch (no nn.Module magic), and computed in float64 from
float32 weights, so the saved activations/gradients are the exact answers for those f32 weights,
rounded once to f32. Our CPU trainer works in f32 and should match them to ~1e-5 relative.

Init (only the saved values matter): embeddings and the lm head ~ N(0, 0.02) (so the init loss
is ~ln V), norm weights 1 + 0.1 N(0,1), biases 0.01 N(0,1), and every other matrix
~ N(0, 1/in_features). The last one, rather than 0.02, keeps each block's output O(1): with 0.02
the attention of the tiny GPT-2 is almost uniform and the blocks barely change the logits, so a
wrong mask, head split or RoPE pairing would hide under the tolerance of a whole-model test.

CONVENTIONS (these are what the C side must reproduce)
------------------------------------------------------
Common
  * Linear weights are [out_features, in_features] (torch.nn.Linear): y = x @ W^T (+ b).
  * Batch: `inputs`, `targets` are int32 [B, T]; one target is -1 (ignored). The loss is the
    mean cross-entropy over the non-ignored targets (torch F.cross_entropy, ignore_index=-1),
    `loss` is a 0-d F32 tensor. `logits` are [B, T, V] (V = Vp = 64: no vocabulary padding).
  * `grad.<name>` is d loss / d <name> for the loss above (a single backward, no scaling).
  * AdamW (torch.optim.AdamW semantics, decoupled decay): lr 1e-3, betas (0.9, 0.95), eps 1e-8,
    weight_decay 0.1 on 2-D tensors (matrices and embeddings) only, 0 on 1-D tensors (norm
    weights, biases, q_norm/k_norm); no gradient clipping; bias-corrected, step t = 1..10.
    `adamw_losses[i]` is the loss at step i+1 BEFORE that step's update (so adamw_losses[0] ==
    loss), `adamw_grad_norms[i]` the global L2 norm of all gradients at that step.
    `final.<name>`: the weights after the 10 updates (written only if the file stays < ~300 KB).
  * Lion (ref_gpt2_lion_tiny, v2134): lion-pytorch's Lion (`pip install lion-pytorch`; its
    update_fn: p *= 1 - lr*wd; p -= lr*sign(beta1*m + (1-beta1)*g); m = beta2*m + (1-beta2)*g),
    lr 3e-4, betas (0.9, 0.99), weight_decay 1.0 on 2-D tensors only, 0 on 1-D tensors, no
    clipping, 10 steps from the weights and batch of ref_gpt2_tiny (stored again: the file stands
    alone). `lion_losses[i]` is the loss before update i+1; `final.<name>` the weights after 10.

GPT-2 (ref_gpt2_tiny): V=64, maxT=16, C=32, L=2, NH=4 (hd=8), MLP 4C=128, B=2, T=8
  x = wte[inputs] + wpe[0..T-1]
  per layer i:  h = LN(x; ln_1)                         LayerNorm eps 1e-5, biased variance, bias
                qkv = h @ c_attn.weight^T + c_attn.bias  [B,T,3C]: q = cols 0..C-1, k = C..2C-1,
                                                        v = 2C..3C-1; head j = cols j*hd..j*hd+hd-1
                y = causal softmax(q k^T / sqrt(hd)) v  per head, heads concatenated back to [B,T,C]
                x = x + y @ c_proj.weight^T + c_proj.bias
                h = LN(x; ln_2)
                x = x + gelu_tanh(h @ c_fc^T + b) @ mlp.c_proj^T + b
                gelu_tanh(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))
  logits = LN(x; ln_f) @ wte^T                          tied lm head, no bias
  NOTE: Hugging Face GPT-2 checkpoints store c_attn/c_fc/c_proj as Conv1D [in, out]; ours are
  transposed to [out, in]. The names are otherwise HF's.

Llama (ref_llama_tiny): V=64, C=32, L=2, NH=4, NKV=2 (GQA), hd=8, H=48, B=2, T=8, no biases,
untied lm head, RMSNorm eps 1e-5 (weight only), RoPE theta 10000
  x = embed_tokens[inputs]
  per layer i:  h = RMSNorm(x; input_layernorm)         x * rsqrt(mean(x^2) + eps) * w
                q = h @ q_proj^T  -> [B,T,NH,hd]        head j = rows j*hd..j*hd+hd-1 of q_proj
                k = h @ k_proj^T  -> [B,T,NKV,hd],  v = h @ v_proj^T -> [B,T,NKV,hd]
                q = RMSNorm_hd(q; q_norm), k = RMSNorm_hd(k; k_norm)    QK-norm, over each
                                                        head's hd values, BEFORE RoPE (Qwen3)
                q, k = RoPE(q), RoPE(k)                 HF rotate_half: for i < hd/2,
                                                        inv_freq_i = theta^(-2i/hd), angle = t*inv_freq_i,
                                                        cos/sin = cat(angle, angle) over hd,
                                                        x' = x*cos + cat(-x[hd/2:], x[:hd/2])*sin
                                                        (dims i and i+hd/2 form a pair; t = 0..T-1)
                query head j uses kv head j // (NH/NKV) (HF repeat_kv)
                y = causal softmax(q k^T / sqrt(hd)) v, heads concatenated -> [B,T,NH*hd]
                x = x + y @ o_proj^T
                h = RMSNorm(x; post_attention_layernorm)
                x = x + (silu(h @ gate_proj^T) * (h @ up_proj^T)) @ down_proj^T
  logits = RMSNorm(x; model.norm) @ lm_head^T
  For Hyperion's fused layouts: the fused QKV weight is cat(q_proj, k_proj, v_proj) along rows
  ([(NH+2*NKV)*hd, C]: all q heads, then k heads, then v heads), the fused SwiGLU input weight is
  cat(gate_proj, up_proj) along rows ([2H, C]: gate half first).
  This is exactly Hugging Face's Qwen3 architecture (Qwen3ForCausalLM, attention_bias=False):
  --check verifies that.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys


def ensure_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("make_fixtures: torch not found; installing it from PyPI (pip install torch) ...",
              file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "torch"])


ensure_torch()
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: fine
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SIZE_BUDGET = 300 * 1024  # bytes per file; final.* weights only when they fit

DT = torch.float64  # reference precision (weights are f32 values)

# ---------------------------------------------------------------------------------------------
# safetensors writer (the format: u64 LE header length, JSON header, raw LE data)


def tensor_bytes(t):
    t = t.detach().contiguous().flatten()
    if t.dtype in (torch.float32, torch.float64):
        return struct.pack("<%df" % t.numel(), *t.to(torch.float64).tolist())
    if t.dtype in (torch.int32, torch.int64):
        return struct.pack("<%di" % t.numel(), *t.to(torch.int64).tolist())
    raise ValueError("unsupported dtype %s" % t.dtype)


def safetensors_bytes(tensors, metadata):
    """tensors: list of (name, tensor) in file order. Floats are stored F32, ints I32."""
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in tensors:
        b = tensor_bytes(t)
        dtype = "F32" if t.dtype.is_floating_point else "I32"
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # pad so the data starts 8-byte aligned (spec: spaces)
    return struct.pack("<Q", len(hj)) + hj + b"".join(blobs)


def read_safetensors(path):
    """Minimal reader, used to verify what we wrote round-trips."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        cnt = (b - a) // 4
        fmt = "<%d%s" % (cnt, "f" if info["dtype"] == "F32" else "i")
        vals = struct.unpack(fmt, data[a:b])
        dt = torch.float32 if info["dtype"] == "F32" else torch.int32
        out[name] = torch.tensor(vals, dtype=dt).reshape(info["shape"])
    return out

# ---------------------------------------------------------------------------------------------
# shared pieces


def layernorm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)  # biased, like nn.LayerNorm
    return (x - m) / torch.sqrt(v + eps) * w + b


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def causal_attention(q, k, v):
    """q [B,NH,T,hd], k/v [B,NH,T,hd] (already expanded for GQA) -> [B,NH,T,hd]"""
    T, hd = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


# The conventions. --check flips each to a plausible wrong alternative and shows that the
# alternative does NOT match Hugging Face while the chosen one does.
CONV = {"rope": "rotate_half",       # alt: "interleaved" (GPT-J / Meta: pairs (2i, 2i+1))
        "qknorm": "before_rope",     # alt: "after_rope"
        "gqa": "div"}                # query head j -> kv head j // (NH/NKV); alt: "mod" (j % NKV)


def rope_cos_sin(T, hd, theta):
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=DT) / hd)  # [hd/2]: theta^(-2i/hd)
    ang = torch.arange(T, dtype=DT)[:, None] * inv_freq[None, :]  # [T, hd/2]
    emb = torch.cat([ang, ang], dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, T, hd]"""
    if CONV["rope"] == "interleaved":  # wrong-convention control only
        h = x.shape[-1] // 2
        c, s_ = cos[..., :h], sin[..., :h]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * c - x2 * s_, x2 * c + x1 * s_], dim=-1).flatten(-2)
    return x * cos + rotate_half(x) * sin


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=-1)

# ---------------------------------------------------------------------------------------------
# GPT-2


GPT2 = dict(V=64, maxT=16, C=32, L=2, NH=4, B=2, T=8)


def gpt2_params(g, cfg=GPT2):
    V, maxT, C, L = GPT2["V"], GPT2["maxT"], GPT2["C"], GPT2["L"]
    hd = C // GPT2["NH"]
    ln = cfg.get("norm", "layernorm") == "layernorm"

    def emb(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    def w(out_f, in_f):
        return torch.randn(out_f, in_f, generator=g) / math.sqrt(in_f)

    def norm_w(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    def bias(n):
        return 0.01 * torch.randn(n, generator=g)

    p = {"transformer.wte.weight": emb(V, C), "transformer.wpe.weight": emb(maxT, C)}
    for i in range(L):
        pre = "transformer.h.%d." % i
        p[pre + "ln_1.weight"] = norm_w(C)
        if ln:
            p[pre + "ln_1.bias"] = bias(C)
        p[pre + "attn.c_attn.weight"] = w(3 * C, C)
        p[pre + "attn.c_attn.bias"] = bias(3 * C)
        if cfg.get("qk_norm"):
            p[pre + "attn.q_norm.weight"] = norm_w(hd)
            p[pre + "attn.k_norm.weight"] = norm_w(hd)
        p[pre + "attn.c_proj.weight"] = w(C, C)
        p[pre + "attn.c_proj.bias"] = bias(C)
        if cfg.get("placement") == "sandwich":  # v2140: the attention output's norm
            p[pre + "ln_attn_out.weight"] = norm_w(C)
            if ln:
                p[pre + "ln_attn_out.bias"] = bias(C)
        p[pre + "ln_2.weight"] = norm_w(C)
        if ln:
            p[pre + "ln_2.bias"] = bias(C)
        p[pre + "mlp.c_fc.weight"] = w(4 * C, C)
        p[pre + "mlp.c_fc.bias"] = bias(4 * C)
        p[pre + "mlp.c_proj.weight"] = w(C, 4 * C)
        p[pre + "mlp.c_proj.bias"] = bias(C)
        if cfg.get("placement") == "sandwich":  # v2140: the MLP output's norm
            p[pre + "ln_mlp_out.weight"] = norm_w(C)
            if ln:
                p[pre + "ln_mlp_out.bias"] = bias(C)
    p["transformer.ln_f.weight"] = norm_w(C)
    if ln:
        p["transformer.ln_f.bias"] = bias(C)
    return p


def gpt2_forward(p, inputs, cfg=GPT2):
    C, L, NH = GPT2["C"], GPT2["L"], GPT2["NH"]
    B, T = inputs.shape
    hd = C // NH

    def norm(x, name):  # LayerNorm with bias, or (v2141 variant) RMSNorm with a weight only
        if cfg.get("norm", "layernorm") == "rmsnorm":
            return rmsnorm(x, p[name + ".weight"])
        return layernorm(x, p[name + ".weight"], p[name + ".bias"])

    x = p["transformer.wte.weight"][inputs.long()] + p["transformer.wpe.weight"][:T]
    placement = cfg.get("placement", "pre")  # v2140: pre x+f(n(x)), post n(x+f(x)), sandwich x+n'(f(n(x)))
    for i in range(L):
        pre = "transformer.h.%d." % i
        h = x if placement == "post" else norm(x, pre + "ln_1")
        qkv = h @ p[pre + "attn.c_attn.weight"].T + p[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in (q, k, v))
        if cfg.get("qk_norm"):  # v2142 variant: per-head RMSNorm of q and k (after the bias)
            q, k = rmsnorm(q, p[pre + "attn.q_norm.weight"]), rmsnorm(k, p[pre + "attn.k_norm.weight"])
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        if placement == "pre":  # the original expression (same rounding as the committed fixtures)
            x = x + y @ p[pre + "attn.c_proj.weight"].T + p[pre + "attn.c_proj.bias"]
        else:
            a = y @ p[pre + "attn.c_proj.weight"].T + p[pre + "attn.c_proj.bias"]
            if "alpha" in cfg:  # v2143 DeepNorm: x = LN(alpha x + f(x))
                x = cfg["alpha"] * x + a
            else:
                x = x + (norm(a, pre + "ln_attn_out") if placement == "sandwich" else a)
        if placement == "post":
            x = norm(x, pre + "ln_1")
        h = x if placement == "post" else norm(x, pre + "ln_2")
        h = gelu_tanh(h @ p[pre + "mlp.c_fc.weight"].T + p[pre + "mlp.c_fc.bias"])
        if placement == "pre":
            x = x + h @ p[pre + "mlp.c_proj.weight"].T + p[pre + "mlp.c_proj.bias"]
        else:
            f = h @ p[pre + "mlp.c_proj.weight"].T + p[pre + "mlp.c_proj.bias"]
            if "alpha" in cfg:  # v2143 DeepNorm
                x = cfg["alpha"] * x + f
            else:
                x = x + (norm(f, pre + "ln_mlp_out") if placement == "sandwich" else f)
        if placement == "post":
            x = norm(x, pre + "ln_2")
    x = norm(x, "transformer.ln_f")
    return x @ p["transformer.wte.weight"].T


# Variants of the tiny GPT-2 for technique tests (same weight scheme, own seeds):
#   gpt2_qknorm_tiny  (v2142): q_norm/k_norm [hd] gains per layer, per-head RMSNorm (eps 1e-5) of
#                     q and k after the c_attn bias; "transformer.h.N.attn.{q,k}_norm.weight"
#   gpt2_rmsnorm_tiny (v2141): ln_1/ln_2/ln_f are RMSNorm (eps 1e-5), weight only, no norm bias
GPT2_QKNORM = dict(GPT2, qk_norm=True)
GPT2_RMSNORM = dict(GPT2, norm="rmsnorm")
#   gpt2_postln_tiny  (v2140 post): x = LN(x + f(x)) with ln_1 after the attention residual and
#                     ln_2 after the MLP residual; ln_f kept before the head
#   gpt2_sandwich_tiny (v2140 sandwich): x = x + LN_out(f(LN(x))), extra
#                     "transformer.h.N.ln_attn_out" / "ln_mlp_out" .weight/.bias per layer
GPT2_POSTLN = dict(GPT2, placement="post")
GPT2_SANDWICH = dict(GPT2, placement="sandwich")
#   gpt2_deepnorm_tiny (v2143 DeepNorm): post-LN with the residual weighted by
#                     alpha = (2N)^(1/4), N = L = 2 layers (Wang et al. 2022, decoder-only):
#                     x = LN(alpha x + f(x)) after each sublayer; ln_f kept. (The beta init scaling
#                     does not show here: the fixture's weights are loaded.)
GPT2_DEEPNORM = dict(GPT2, placement="post", alpha=(2.0 * GPT2["L"]) ** 0.25)


def variant(cfg):
    return (lambda g: gpt2_params(g, cfg)), (lambda p, inputs: gpt2_forward(p, inputs, cfg))

# ---------------------------------------------------------------------------------------------
# Llama (Qwen3-style QK-norm)


LLAMA = dict(V=64, C=32, L=2, NH=4, NKV=2, hd=8, H=48, B=2, T=8, theta=10000.0)


def llama_params(g):
    V, C, L, NH, NKV, hd, H = (LLAMA[k] for k in ("V", "C", "L", "NH", "NKV", "hd", "H"))

    def emb(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    def w(out_f, in_f):
        return torch.randn(out_f, in_f, generator=g) / math.sqrt(in_f)

    def norm_w(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    p = {"model.embed_tokens.weight": emb(V, C)}
    for i in range(L):
        pre = "model.layers.%d." % i
        p[pre + "input_layernorm.weight"] = norm_w(C)
        p[pre + "self_attn.q_proj.weight"] = w(NH * hd, C)
        p[pre + "self_attn.k_proj.weight"] = w(NKV * hd, C)
        p[pre + "self_attn.v_proj.weight"] = w(NKV * hd, C)
        p[pre + "self_attn.q_norm.weight"] = norm_w(hd)
        p[pre + "self_attn.k_norm.weight"] = norm_w(hd)
        p[pre + "self_attn.o_proj.weight"] = w(C, NH * hd)
        p[pre + "post_attention_layernorm.weight"] = norm_w(C)
        p[pre + "mlp.gate_proj.weight"] = w(H, C)
        p[pre + "mlp.up_proj.weight"] = w(H, C)
        p[pre + "mlp.down_proj.weight"] = w(C, H)
    p["model.norm.weight"] = norm_w(C)
    p["lm_head.weight"] = emb(V, C)
    return p


def llama_forward(p, inputs):
    L, NH, NKV, hd, theta = (LLAMA[k] for k in ("L", "NH", "NKV", "hd", "theta"))
    B, T = inputs.shape
    cos, sin = rope_cos_sin(T, hd, theta)
    rep = NH // NKV
    x = p["model.embed_tokens.weight"][inputs.long()]
    for i in range(L):
        pre = "model.layers.%d." % i
        h = rmsnorm(x, p[pre + "input_layernorm.weight"])
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, NH, hd)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, NKV, hd)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, NKV, hd)
        qn, kn = p[pre + "self_attn.q_norm.weight"], p[pre + "self_attn.k_norm.weight"]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B,heads,T,hd]
        if CONV["qknorm"] == "before_rope":
            q, k = rmsnorm(q, qn), rmsnorm(k, kn)  # QK-norm over hd, then RoPE
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        else:  # wrong-convention control only
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            q, k = rmsnorm(q, qn), rmsnorm(k, kn)
        # query head j reads kv head j // rep (HF repeat_kv: each kv head repeated rep times)
        if CONV["gqa"] == "div":
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        else:  # wrong-convention control only
            k = k.repeat(1, rep, 1, 1)
            v = v.repeat(1, rep, 1, 1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"])
        gate = h @ p[pre + "mlp.gate_proj.weight"].T
        up = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    x = rmsnorm(x, p["model.norm.weight"])
    return x @ p["lm_head.weight"].T

# ---------------------------------------------------------------------------------------------
# batch, gradients, AdamW


def make_batch(g, V, B, T):
    """A token stream, inputs = stream[:-1], targets = stream[1:] (as the data loader does);
    one target set to -1 (ignored)."""
    stream = torch.randint(0, V, (B, T + 1), generator=g, dtype=torch.int32)
    inputs, targets = stream[:, :T].contiguous(), stream[:, 1:].contiguous()
    targets[1, 3] = -1
    return inputs, targets


def loss_and_grads(forward, params, inputs, targets):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    logits = forward(p, inputs)
    loss = loss_fn(logits, targets)
    grads = torch.autograd.grad(loss, list(p.values()))
    return logits.detach(), loss.detach(), dict(zip(p.keys(), grads))


def adamw_run(forward, params, inputs, targets, steps=10, lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
              wd=0.1):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    decay = [t for t in p.values() if t.dim() == 2]  # matrices and embeddings
    no_decay = [t for t in p.values() if t.dim() != 2]  # norm weights, biases, q/k_norm
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        norms.append(math.sqrt(sum(float((t.grad.double() ** 2).sum()) for t in p.values())))
        opt.step()
    return (torch.tensor(losses, dtype=DT), torch.tensor(norms, dtype=DT),
            {k: v.detach() for k, v in p.items()})


def build(name, param_fn, forward, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    params32 = param_fn(g)  # f32 values: what the file stores and the C side loads
    params = {k: v.to(torch.float32).to(DT) for k, v in params32.items()}
    inputs, targets = make_batch(g, cfg["V"], cfg["B"], cfg["T"])
    logits, loss, grads = loss_and_grads(forward, params, inputs, targets)
    losses, norms, final = adamw_run(forward, params, inputs, targets)

    # sanity: near-zero logits at init give loss ~ ln V
    lnV = math.log(cfg["V"])
    print("%s: loss %.6f (ln V = %.6f), after 10 AdamW steps %.6f" %
          (name, loss.item(), lnV, losses[-1].item()))
    assert abs(loss.item() - lnV) < 0.05, "init loss far from ln V"
    assert abs(losses[0].item() - loss.item()) < 1e-12
    assert losses[-1] < losses[0], "AdamW did not reduce the loss"

    tensors = [(k, v) for k, v in params.items()]
    tensors += [("inputs", inputs), ("targets", targets), ("logits", logits), ("loss", loss)]
    tensors += [("grad." + k, v) for k, v in grads.items()]
    tensors += [("adamw_losses", losses), ("adamw_grad_norms", norms)]
    meta = {"model": name, "config": json.dumps(cfg), "seed": str(seed),
            "precision": "computed in float64 from float32 weights, stored F32",
            "adamw": "lr=1e-3 betas=(0.9,0.95) eps=1e-8 wd=0.1 on 2-D tensors only, no clip, "
                     "10 steps, loss recorded before each update",
            "generator": "tests/reference/make_fixtures.py", "torch": torch.__version__}
    blob = safetensors_bytes(tensors + [("final." + k, v) for k, v in final.items()], meta)
    if len(blob) <= SIZE_BUDGET:
        meta["final"] = "final.* = weights after the 10 AdamW steps"
        blob = safetensors_bytes(tensors + [("final." + k, v) for k, v in final.items()], meta)
    else:
        meta["final"] = "omitted (size budget)"
        blob = safetensors_bytes(tensors, meta)
    os.makedirs(FIXTURES, exist_ok=True)
    path = os.path.join(FIXTURES, "ref_%s.safetensors" % name)
    with open(path, "wb") as f:
        f.write(blob)
    # round trip
    back = read_safetensors(path)
    for k, v in tensors:
        want = v.to(torch.float32) if v.dtype.is_floating_point else v
        assert torch.equal(back[k], want), k
    print("  wrote %s (%d bytes, %d tensors, final weights %s)" %
          (os.path.relpath(path, REPO), len(blob), len(back),
           "included" if "final.lm_head.weight" in back or "final.transformer.wte.weight" in back
           else "omitted"))
    return params, inputs, targets, logits, loss


LION = dict(lr=3e-4, betas=(0.9, 0.99), wd=1.0)


def ensure_lion():
    try:
        import lion_pytorch  # noqa: F401
    except ImportError:
        print("make_fixtures: lion-pytorch not found; installing it from PyPI (pip install lion-pytorch) ...",
              file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "lion-pytorch"])
    from lion_pytorch import Lion
    return Lion


def lion_run(forward, params, inputs, targets, steps=10, lr=LION["lr"], betas=LION["betas"], wd=LION["wd"]):
    """10 steps of lion-pytorch's Lion (the authors' update rule), decay on 2-D tensors only."""
    Lion = ensure_lion()
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    decay = [t for t in p.values() if t.dim() == 2]
    no_decay = [t for t in p.values() if t.dim() != 2]
    opt = Lion([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
               lr=lr, betas=betas)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(p, inputs), targets)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    return torch.tensor(losses, dtype=DT), {k: v.detach() for k, v in p.items()}


def build_lion(name, param_fn, forward, cfg, seed):
    """The weights and batch of build(seed) again, then 10 Lion steps (v2134)."""
    g = torch.Generator().manual_seed(seed)
    params32 = param_fn(g)
    params = {k: v.to(torch.float32).to(DT) for k, v in params32.items()}
    inputs, targets = make_batch(g, cfg["V"], cfg["B"], cfg["T"])
    losses, final = lion_run(forward, params, inputs, targets)
    print("%s: loss %.6f, after 10 Lion steps %.6f" % (name, losses[0].item(), losses[-1].item()))
    assert losses[-1] < losses[0], "Lion did not reduce the loss"
    tensors = [(k, v) for k, v in params.items()]
    tensors += [("inputs", inputs), ("targets", targets), ("lion_losses", losses)]
    tensors += [("final." + k, v) for k, v in final.items()]
    import lion_pytorch
    meta = {"model": name, "config": json.dumps(cfg), "seed": str(seed),
            "precision": "computed in float64 from float32 weights, stored F32",
            "lion": "lion-pytorch Lion lr=%g betas=(%g,%g) wd=%g on 2-D tensors only, no clip, 10 steps, "
                    "loss recorded before each update" % (LION["lr"], LION["betas"][0], LION["betas"][1], LION["wd"]),
            "lion_pytorch": getattr(lion_pytorch, "__version__", "?"),
            "final": "final.* = weights after the 10 Lion steps",
            "generator": "tests/reference/make_fixtures.py", "torch": torch.__version__}
    blob = safetensors_bytes(tensors, meta)
    os.makedirs(FIXTURES, exist_ok=True)
    path = os.path.join(FIXTURES, "ref_%s.safetensors" % name)
    with open(path, "wb") as f:
        f.write(blob)
    back = read_safetensors(path)
    for k, v in tensors:
        want = v.to(torch.float32) if v.dtype.is_floating_point else v
        assert torch.equal(back[k], want), k
    print("  wrote %s (%d bytes, %d tensors)" % (os.path.relpath(path, REPO), len(blob), len(back)))

# ---------------------------------------------------------------------------------------------
# optional cross-check with Hugging Face transformers


def check_with_transformers(gpt2, llama):
    try:
        import transformers
    except ImportError:
        print("--check: transformers is not installed (pip install transformers); skipped")
        return
    print("--check: comparing with transformers %s" % transformers.__version__)
    # GPT-2
    params, inputs, targets, logits, loss = gpt2
    cfg = transformers.GPT2Config(vocab_size=GPT2["V"], n_positions=GPT2["maxT"],
                                  n_embd=GPT2["C"], n_layer=GPT2["L"], n_head=GPT2["NH"],
                                  activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = transformers.GPT2LMHeadModel(cfg).to(DT).eval()
    sd = {}
    for k, v in params.items():
        conv1d = any(s in k for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        sd[k] = v.T.contiguous() if conv1d else v  # HF Conv1D stores [in, out]
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all(k.endswith("attn.bias") or k.endswith("masked_bias") or k == "lm_head.weight"
               for k in missing), missing
    with torch.no_grad():
        hf = m(inputs.long()).logits
    d = (hf - logits).abs().max().item()
    print("  GPT-2 logits max |ours - HF GPT2LMHeadModel| = %.3e" % d)
    assert d < 1e-10
    # Llama with QK-norm = Qwen3
    params, inputs, targets, logits, loss = llama
    cfg = transformers.Qwen3Config(vocab_size=LLAMA["V"], hidden_size=LLAMA["C"],
                                   intermediate_size=LLAMA["H"], num_hidden_layers=LLAMA["L"],
                                   num_attention_heads=LLAMA["NH"],
                                   num_key_value_heads=LLAMA["NKV"], head_dim=LLAMA["hd"],
                                   rms_norm_eps=1e-5, rope_theta=LLAMA["theta"],
                                   max_position_embeddings=64, tie_word_embeddings=False,
                                   attention_bias=False, attention_dropout=0.0,
                                   use_sliding_window=False)
    try:
        cfg._attn_implementation = "eager"
    except Exception:
        pass
    m = transformers.Qwen3ForCausalLM(cfg).to(DT).eval()
    missing, unexpected = m.load_state_dict(params, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with torch.no_grad():
        hf = m(inputs.long()).logits
    # HF's Qwen3 computes RMSNorm and the RoPE tables in float32 even in a float64 model: that
    # alone moves the logits by ~1e-8 relative. A wrong convention moves them by >1e-2.
    scale = hf.abs().max().item()
    d = (hf - logits).abs().max().item() / scale
    print("  Llama logits max |ours - HF Qwen3ForCausalLM| / max|logits| = %.3e" % d)
    assert d < 1e-6
    for key, alt in (("rope", "interleaved"), ("qknorm", "after_rope"), ("gqa", "mod")):
        keep = CONV[key]
        CONV[key] = alt
        with torch.no_grad():
            da = (hf - llama_forward(params, inputs)).abs().max().item() / scale
        CONV[key] = keep
        print("    control %s=%s (wrong): relative difference %.3e" % (key, alt, da))
        assert da > 1e-3, "the check cannot tell %s conventions apart" % key


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="also compare the logits with Hugging Face transformers (GPT2, Qwen3)")
    ap.add_argument("--only", metavar="NAMES",
                    help="comma-separated fixtures to (re)write, e.g. gpt2_qknorm_tiny (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    builds = {
        "gpt2_tiny": lambda: build("gpt2_tiny", gpt2_params, gpt2_forward, GPT2, seed=1234),
        "llama_tiny": lambda: build("llama_tiny", llama_params, llama_forward, LLAMA, seed=5678),
        "gpt2_qknorm_tiny": lambda: build("gpt2_qknorm_tiny", *variant(GPT2_QKNORM), GPT2_QKNORM,
                                          seed=2142),
        "gpt2_rmsnorm_tiny": lambda: build("gpt2_rmsnorm_tiny", *variant(GPT2_RMSNORM),
                                           GPT2_RMSNORM, seed=2141),
        "gpt2_postln_tiny": lambda: build("gpt2_postln_tiny", *variant(GPT2_POSTLN), GPT2_POSTLN, seed=2140),
        "gpt2_deepnorm_tiny": lambda: build("gpt2_deepnorm_tiny", *variant(GPT2_DEEPNORM), GPT2_DEEPNORM, seed=2143),
        "gpt2_sandwich_tiny": lambda: build("gpt2_sandwich_tiny", *variant(GPT2_SANDWICH), GPT2_SANDWICH,
                                            seed=21400),
        "gpt2_lion_tiny": lambda: build_lion("gpt2_lion_tiny", gpt2_params, gpt2_forward, GPT2, seed=1234),
    }
    only = args.only.split(",") if args.only else list(builds)
    out = {name: builds[name]() for name in only}
    if args.check and "gpt2_tiny" in out and "llama_tiny" in out:
        check_with_transformers(out["gpt2_tiny"], out["llama_tiny"])


if __name__ == "__main__":
    main()
