#!/usr/bin/env python3
"""make_moe_fixture.py — a tiny MixtralForCausalLM made by transformers, with its logits, router
probabilities, top-k choices and load-balancing losses, for tests/unit/test_moe_hf.c (our MoE
forward, routing and aux loss on the same weights, and HF export/import of an MoE plan).

Made offline (pip install torch transformers safetensors); CI never runs this script, it only reads
what it wrote under tests/fixtures/hf_mixtral_tiny/ (= tests/fixtures/models/ref-mixtral.yaml):
  config.json, generation_config.json, model.safetensors   save_pretrained(safe_serialization=True)
  reference.safetensors:
    inputs        I32 [16]        fixed tokens (seeded)
    logits        F32 [16, 64]    HF's logits (the saved directory loaded back in float64)
    router_probs  F32 [2, 16, 4]  softmax of each layer's router logits (output_router_logits)
    router_topk   I32 [2, 16, 2]  each token's top-2 experts, most probable first
    aux_layer     F32 [2]         coef x load_balancing_loss_func of one layer's router logits
                                  (the Switch loss per layer, which our trainer sums over layers)
    aux_pooled    F32 [1]         coef x the model's own aux_loss (transformers pools the layers)
Weights: seeded normal, std 1/sqrt(in_features) (router: 3/sqrt(C), so routing is far from
uniform); norm gains 1 + 0.1 N(0,1). The script checks every token's gap between its 2nd and 3rd
expert probability exceeds 1e-3, so float32 rounding (~1e-7 here) cannot change a top-k choice.
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "fixtures", "hf_mixtral_tiny")
V, T, C, E, K, COEF = 64, 16, 32, 4, 2, 0.02


def fill(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("gate.weight") and "block_sparse_moe" in name or ".mlp.gate.weight" in name:
                p.copy_(3 * torch.randn(p.shape, generator=g) / C ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def main():
    torch.manual_seed(0)
    cfg = MixtralConfig(vocab_size=V, hidden_size=C, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=8, max_position_embeddings=T, rms_norm_eps=1e-5,
                        rope_theta=10000.0, hidden_act="silu", num_local_experts=E, num_experts_per_tok=K,
                        router_aux_loss_coef=COEF, router_jitter_noise=0.0, sliding_window=None,
                        output_router_logits=False, tie_word_embeddings=False)
    model = MixtralForCausalLM(cfg)
    fill(model, 7)
    model.save_pretrained(OUT, safe_serialization=True)
    g = torch.Generator().manual_seed(8)
    inputs = torch.randint(0, V, (T,), generator=g, dtype=torch.int64)
    # eager experts: the grouped GEMM kernel has no float64
    ref = AutoModelForCausalLM.from_pretrained(OUT, dtype=torch.float64, experts_implementation="eager").eval()
    with torch.no_grad():
        out = ref(inputs[None], output_router_logits=True)
    rl = [r.reshape(T, E) for r in out.router_logits]
    probs = torch.stack([torch.softmax(r, dim=-1) for r in rl])
    srt = probs.sort(dim=-1, descending=True)
    gap = float((srt.values[..., K - 1] - srt.values[..., K]).min())
    assert gap > 1e-3, "a token's top-k choice is too close to call: %g" % gap
    aux_layer = torch.stack([load_balancing_loss_func((r,), E, K) for r in rl]) * COEF
    save_file({"inputs": inputs.to(torch.int32), "logits": out.logits[0].to(torch.float32).contiguous(),
               "router_probs": probs.to(torch.float32).contiguous(),
               "router_topk": srt.indices[..., :K].to(torch.int32).contiguous(),
               "aux_layer": aux_layer.to(torch.float32).contiguous(),
               "aux_pooled": (out.aux_loss * COEF).reshape(1).to(torch.float32)},
              os.path.join(OUT, "reference.safetensors"), metadata={"format": "pt"})
    print("wrote", OUT, "min top-k gap %.3g" % gap, "aux per layer", aux_layer.tolist(), "pooled", float(out.aux_loss * COEF))


if __name__ == "__main__":
    sys.exit(main())
