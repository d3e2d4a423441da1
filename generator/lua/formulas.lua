-- formulas.lua — the one source of truth for model arithmetic: parameter counts, FLOPs per
-- token, activation sizes. Used by the plan (MFU reporting in the runtime), the audit and
-- `gen size`. Pure functions of a model table (specs/models/*.yaml, plain) — no I/O.
local F = {}

-- Padded vocabulary: a multiple of 64 (better GEMM tiles); padded rows are zero and never trained.
function F.padded_vocab(V)
  return ((V + 63) // 64) * 64
end

-- Shapes derived from a model spec.
function F.dims(m)
  local NH = m.n_heads
  local NKV = m.n_kv_heads or NH
  local hd = m.d_model // NH
  return {
    V = m.vocab_size, Vp = F.padded_vocab(m.vocab_size), C = m.d_model, L = m.n_layers,
    NH = NH, NKV = NKV, hd = hd, H = m.ffn_hidden, maxT = m.context,
    qkv = (NH + 2 * NKV) * hd,
    fc = (m.activation == "swiglu") and 2 * m.ffn_hidden or m.ffn_hidden,
    bias = (m.bias ~= false) and (m.arch == "gpt2" or m.bias == true),
  }
end

-- Parameter count (unpadded vocabulary, as papers count it).
function F.param_count(m)
  local d = F.dims(m)
  local C, L = d.C, d.L
  local per_layer = d.qkv * C + C * d.NH * d.hd + d.fc * C + C * d.H
  local norms = (m.norm == "layernorm" and (d.bias and 2 or 1) or 1) * C
  per_layer = per_layer + 2 * norms
  if d.bias then per_layer = per_layer + d.qkv + C + d.fc + C end
  if m.qk_norm then per_layer = per_layer + 2 * d.hd end
  local n = L * per_layer + d.V * C + norms
  if m.position == "learned" then n = n + d.maxT * C end
  if not m.tied_embeddings then n = n + d.V * C end
  return n
end

-- Non-embedding parameters that take part in matmuls per token (for FLOPs): every linear weight
-- including the LM head (the embedding lookup itself costs no FLOPs).
function F.matmul_params(m)
  local d = F.dims(m)
  local per_layer = d.qkv * d.C + d.C * d.NH * d.hd + d.fc * d.C + d.C * d.H
  return d.L * per_layer + d.V * d.C
end

-- Training FLOPs per token at sequence length T: 6 per matmul weight (forward 2, backward 4)
-- plus causal attention's QK^T and AV (forward 2·2·T·C per layer for full attention; we count
-- the full T like PaLM's MFU definition, 6·L·... = 12·L·C·T per token).
function F.train_flops_per_token(m, T)
  local d = F.dims(m)
  return 6 * F.matmul_params(m) + 12 * d.L * d.NH * d.hd * T
end

return F
