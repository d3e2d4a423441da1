#!/usr/bin/env python3
"""make_hf_fixtures.py — Hugging Face model directories and their logits, for the weight I/O tests
(tests/unit/test_hf_io.c, tests/gen/test_hf_cli.sh): `train --init-from` and `gen export`.

Made offline with `transformers` (pip install torch transformers safetensors); CI never runs this
script, it only reads what it wrote (small: ~150 KB in all) under tests/fixtures/:

  hf_gpt2_tiny/        GPT2LMHeadModel  = tests/fixtures/models/ref-gpt2.yaml (tied, Conv1D, gelu_new)
  hf_llama_tiny/       LlamaForCausalLM = tests/fixtures/models/ref-llama-tied.yaml (GQA 4:2, tied)
  hf_qwen3_tiny/       Qwen3ForCausalLM = tests/fixtures/models/ref-llama.yaml (QK-norm, untied)
  hf_qwen3_tiny_bf16/  the same weights rounded to bf16, saved as BF16 tensors

Each directory is what `save_pretrained(safe_serialization=True)` writes (config.json,
generation_config.json, model.safetensors) plus `reference.safetensors`:
  inputs  I32 [16]      fixed tokens (seeded)
  logits  F32 [16, 64]  HF's logits for them: the saved directory loaded back with
                        AutoModelForCausalLM.from_pretrained(dtype=float64), so the test's
                        tolerance is ours alone (and bf16 weights are exact in float64).
Weights: seeded normal, std 1/sqrt(in_features) for matrices, 0.5 for embeddings, norm gains
1 + 0.1 N(0,1), biases 0.1 N(0,1) — larger than HF's init so the logits are far from uniform.
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "fixtures")
V, T = 64, 16


def fill(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                if name.endswith("bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "wte" in name or "wpe" in name or "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # Conv1D is [in, out], Linear [out, in]
                fan_in = p.shape[0] if ".c_" in name else p.shape[1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def write(model, name, seed, bf16=False):
    fill(model, seed)
    if bf16:
        model = model.to(torch.bfloat16)
    d = os.path.join(OUT, name)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randint(0, V, (T,), generator=g, dtype=torch.int64)
    # the reference reads the saved directory back (as a user would), computing in float64
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64).eval()
    with torch.no_grad():
        logits = ref(inputs[None]).logits[0].to(torch.float32)
    save_file({"inputs": inputs.to(torch.int32), "logits": logits.contiguous()},
              os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
    print("wrote", d, "max|logit|", float(logits.abs().max()))


def main():
    torch.manual_seed(0)
    gpt2 = GPT2Config(vocab_size=V, n_positions=T, n_embd=32, n_layer=2, n_head=4, n_inner=128,
                      activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0,
                      embd_pdrop=0, attn_pdrop=0, tie_word_embeddings=True)
    write(GPT2LMHeadModel(gpt2), "hf_gpt2_tiny", 1)
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=T,
                  rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=False, hidden_act="silu")
    write(LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, mlp_bias=False, **common)), "hf_llama_tiny", 2)
    write(Qwen3ForCausalLM(Qwen3Config(tie_word_embeddings=False, **common)), "hf_qwen3_tiny", 3)
    write(Qwen3ForCausalLM(Qwen3Config(tie_word_embeddings=False, **common)), "hf_qwen3_tiny_bf16", 3, bf16=True)


if __name__ == "__main__":
    sys.exit(main())
