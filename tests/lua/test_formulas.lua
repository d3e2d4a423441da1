-- test_formulas.lua — unit tests of generator/lua/formulas.lua against values computed by hand
-- (the arithmetic is written next to each expected value). Run with the plain interpreter from
-- the repository root: `lua5.4 tests/lua/test_formulas.lua` (formulas.lua needs no `hyp`).
-- Prints "N passed, M failed" and exits nonzero on any failure.
local here = debug.getinfo(1, "S").source:match("^@(.*)/tests/lua/[^/]*$") or "."
package.path = here .. "/generator/lua/?.lua;" .. package.path
local F = require("formulas")

local pass, fail = 0, 0
local function ok(name, cond, detail)
  if cond then
    pass = pass + 1
    print("ok   " .. name)
  else
    fail = fail + 1
    print("FAIL " .. name .. (detail and (": " .. detail) or ""))
  end
end
-- equal within a relative tolerance (default 1e-9: the hand values are exact decimals)
local function near(name, got, want, rel)
  rel = rel or 1e-9
  local good = got == want or (type(got) == "number" and math.abs(got - want) <= rel * math.max(math.abs(want), 1e-300))
  ok(name, good, string.format("got %.17g, want %.17g", tonumber(got) or 0 / 0, want))
end
local function eq(name, got, want) ok(name, got == want, string.format("got %s, want %s", tostring(got), tostring(want))) end

-- ---- models ------------------------------------------------------------------------------
local tiny = { name = "tiny", arch = "gpt2", vocab_size = 256, context = 256, d_model = 128, n_layers = 4,
  n_heads = 4, ffn_hidden = 512, norm = "layernorm", activation = "gelu", position = "learned", tied_embeddings = true }
local gpt2 = { name = "gpt2-124m", arch = "gpt2", vocab_size = 50257, context = 1024, d_model = 768, n_layers = 12,
  n_heads = 12, ffn_hidden = 3072, norm = "layernorm", activation = "gelu", position = "learned", tied_embeddings = true }

-- ---- the existing functions keep their results ----------------------------------------------
-- tiny, per layer: qkv 3·128·128 = 49152 (+384 bias), attn proj 128·128 = 16384 (+128),
-- fc 512·128 = 65536 (+512), fc proj 128·512 = 65536 (+128), two layernorms 2·(128+128) = 512
--   = 198272; × 4 layers = 793088; + wte 256·128 = 32768 + wpe 256·128 = 32768 + ln_f 256 = 858880
eq("param_count tiny", F.param_count(tiny), 858880)
-- GPT-2 small: the well-known 124,439,808 (tied head)
eq("param_count gpt2-124m", F.param_count(gpt2), 124439808)
-- matmul params tiny: 4·(49152 + 16384 + 65536 + 65536) + head 256·128 = 786432 + 32768 = 819200
eq("matmul_params tiny", F.matmul_params(tiny), 819200)
-- FLOPs/token at T = 256: 6·819200 = 4915200, + 12·L·NH·hd·T = 12·4·4·32·256 = 1572864 → 6488064
eq("train_flops_per_token tiny T=256", F.train_flops_per_token(tiny, 256), 6488064)
-- the causal half (v2187 attention = "causal"): 4915200 + 6·4·4·32·256 = 4915200 + 786432 = 5701632
eq("train_flops_per_token tiny T=256 causal", F.train_flops_per_token(tiny, 256, true), 5701632)
eq("padded_vocab 50257", F.padded_vocab(50257), 50304) -- 786 · 64 = 50304

-- ---- seed 004 throughput model --------------------------------------------------------------
-- a test GPU: 100 TFLOP/s, 1 TB/s HBM, 100 Gb/s NIC; N = 1e9, L = 10, d = 1000, b = 2, k = 6,
-- g = 1, alpha = 16, c = 6, B = 512000, b_g = 2
local base = { N = 1e9, L = 10, d = 1000, b = 2, k = 6, g = 1, alpha = 16, c = 6, B = 512000, bg = 2, p = 1,
  peak_flops = 100e12, hbm_Bps = 1e12, nic_gbps = 100, ec = 0.75, em = 0.75, en = 0.75 }
local function with(t) local x = {}; for k, v in pairs(base) do x[k] = v end; for k, v in pairs(t) do x[k] = v end; return x end

-- compute-bound: F = 1·6·1e9 = 6e9; M = 16·1e9/512000 + 6·10·1000·2 = 31250 + 120000 = 151250
-- r_compute = 0.75·100e12/6e9 = 12500; r_memory = 0.75·1e12/151250 = 4958677.685950413
local t = F.throughput(base)
near("compute: F", t.flops_per_token, 6e9)
near("compute: M", t.hbm_bytes_per_token, 151250)
eq("compute: X = 0 at p = 1", t.net_bytes_per_token, 0)
near("compute: r_compute", t.r_compute, 12500)
near("compute: r_memory", t.r_memory, 750e9 / 151250)
eq("compute: r_network inf at p = 1", t.r_network, math.huge)
near("compute: rate", t.rate, 12500)
eq("compute: bound", t.bound, "compute")
near("compute: intensity F/M", t.intensity, 6e9 / 151250) -- 39669.42...
near("compute: balance", t.balance, 100)                   -- 100e12 / 1e12

-- memory-bound: N = 1e6 → F = 6e6, r_compute = 75e12/6e6 = 12.5e6;
-- M = 16·1e6/512000 + 120000 = 31.25 + 120000 = 120031.25, r_memory = 750e9/120031.25 = 6248372.6...
t = F.throughput(with({ N = 1e6 }))
near("memory: M", t.hbm_bytes_per_token, 120031.25)
near("memory: r_memory", t.r_memory, 750e9 / 120031.25)
near("memory: r_compute", t.r_compute, 12.5e6)
eq("memory: bound", t.bound, "memory")
near("memory: rate", t.rate, 750e9 / 120031.25)

-- network-bound: p = 8, B = 65536, NIC 10 Gb/s:
-- X = 2·(8−1)/8 · 1e9·2 / (65536/8) = 1.75 · 2e9 / 8192 = 427246.09375 B/token
-- r_network = 0.75 · (10e9/8) / 427246.09375 = 937.5e6 / 427246.09375 = 2194.285714...
-- M = 16e9/65536 + 120000 = 244140.625 + 120000 = 364140.625 → r_memory = 2059638.6 (not binding)
t = F.throughput(with({ p = 8, B = 65536, nic_gbps = 10 }))
near("network: X", t.net_bytes_per_token, 427246.09375)
near("network: r_network", t.r_network, 937.5e6 / 427246.09375)
near("network: M", t.hbm_bytes_per_token, 364140.625)
eq("network: bound", t.bound, "network")
-- the same run with no NIC at all cannot synchronise: rate 0, network-bound
t = F.throughput(with({ p = 8, nic_gbps = 0 }))
eq("network: no NIC gives rate 0", t.rate, 0)

-- seed 004's own worked example (its notebook): 70B, L = 80, d = 8192, g = 1.2, c = 5, alpha 16,
-- B = 512000, p = 8, "H100-SXM" 900 TFLOP/s, 3.35 TB/s, 200 Gb/s, $3.93/hr, utilization 0.75.
-- r_compute = 0.75·900e12/(1.2·6·70e9) = 675e12/504e9 = 1339.2857 (the notebook prints 1339.29)
-- M = 16·70e9/512000 + 5·80·8192·2 = 2187500 + 6553600 = 8741100
-- X = 2·7/8·70e9·2/(512000/8) = 245e9/64000 = 3828125 → r_network = 0.75·25e9/3828125 = 4897.96
local ex = { N = 70e9, L = 80, d = 8192, b = 2, k = 6, g = 1.2, alpha = 16, c = 5, B = 512000, bg = 2, p = 8,
  peak_flops = 900e12, hbm_Bps = 3.35e12, nic_gbps = 200, ec = 0.75, em = 0.75, en = 0.75 }
t = F.throughput(ex)
near("seed 004 example: r_compute", t.r_compute, 675e12 / 504e9)
near("seed 004 example: M", t.hbm_bytes_per_token, 8741100)
near("seed 004 example: r_network", t.r_network, 18.75e9 / 3828125)
eq("seed 004 example: bound", t.bound, "compute")
-- cluster for 200k tokens/s: ceil(200000/1339.2857) = ceil(149.33) = 150 GPUs (notebook: 150),
-- $/hr = 150·3.93 = 589.5 (notebook: 589.5), cluster TB/s = 2e5·8741100/1e12 = 1.74822 (1.748),
-- $/TB/s·hr = 3.93/3.35 = 1.173 (1.17)
local c = F.cluster(t, 2e5, 3.93, 3.35)
eq("seed 004 example: GPUs", c.gpus, 150)
near("seed 004 example: $/hr", c.usd_per_hr, 589.5)
near("seed 004 example: cluster TB/s", c.cluster_hbm_tbps, 1.74822)
near("seed 004 example: $/TB/s·hr", c.usd_per_tbps_hr, 3.93 / 3.35)
-- an exact multiple needs no extra GPU: 100000/12500 = 8 exactly
eq("cluster: exact multiple", F.cluster(F.throughput(base), 1e5, 2, 1).gpus, 8)
eq("cluster: at least one GPU", F.cluster(F.throughput(base), 1, 2, 1).gpus, 1)

-- ---- model state per GPU (ZeRO / FSDP) ------------------------------------------------------
-- bf16 mixed precision, N = 1e9: params 2e9 + grads 2e9 + (master 4 + m 4 + v 4)·1e9 = 16e9
local s0 = F.model_state(1e9, { dtype = "bf16", stage = 0, p = 4 })
near("zero0 bf16 total", s0.total, 16e9)
-- stage 1 over 4: optimizer 12e9/4 = 3e9 → 2e9 + 2e9 + 3e9 = 7e9
near("zero1 bf16 p=4", F.model_state(1e9, { dtype = "bf16", stage = 1, p = 4 }).total, 7e9)
-- stage 2: grads too: 2e9 + 0.5e9 + 3e9 = 5.5e9
near("zero2 bf16 p=4", F.model_state(1e9, { dtype = "bf16", stage = 2, p = 4 }).total, 5.5e9)
-- stage 3: params too: 0.5e9 + 0.5e9 + 3e9 = 4e9, plus the gather buffer 2 layers · 1e7 · 2 B = 4e7
local s3 = F.model_state(1e9, { dtype = "bf16", stage = 3, p = 4, layer_params = 1e7 })
near("zero3 bf16 p=4 state", s3.total - s3.gather, 4e9)
near("zero3 gather buffer", s3.gather, 4e7)
-- v2104 prefetch_layers: 0 gathers just in time (one layer buffer: 2e7), 3 keeps four (8e7)
near("zero3 gather buffer, prefetch 0", F.model_state(1e9, { dtype = "bf16", stage = 3, p = 4, layer_params = 1e7, prefetch = 0 }).gather, 2e7)
near("zero3 gather buffer, prefetch 3", F.model_state(1e9, { dtype = "bf16", stage = 3, p = 4, layer_params = 1e7, prefetch = 3 }).gather, 8e7)
-- fp32 (the CPU runtime): 4 + 4 + m 4 + v 4 = 16 B/param → 4 × param floats
near("fp32 state = 16 B/param", F.model_state(858880, { dtype = "fp32", stage = 0 }).total, 16 * 858880)
-- fp8: bf16's 16 B/param + a 1 B FP8 weight copy = 17 B/param
near("fp8 state = 17 B/param", F.model_state(1e9, { dtype = "fp8", stage = 0 }).total, 17e9)
-- layer params tiny (with biases), as the runtime's ZeRO-3 layer group holds them: matmul weights
-- 384·128 + 128·128 + 512·128 + 128·512 = 196608, biases 384 + 128 + 512 + 128 = 1152, two
-- layernorms 2·2·128 = 512 → 198272 (measured: the stage-3 gradient workspace of tiny at np=2 is
-- 2 ranks · 99136 floats = 198272 floats, tests/gen/test_dp.sh)
eq("layer_params tiny", F.layer_params(tiny), 198272)
-- the largest ZeRO-3 gather unit: tiny's layer (embeddings 256·128 + 256·128 = 65536 are smaller);
-- GPT-2 124M's embeddings: padded vocabulary 50304·768 + positions 1024·768 = 39419904 (a layer
-- is 7087872)
eq("gather_params tiny", F.gather_params(tiny), 198272)
eq("gather_params gpt2-124m", F.gather_params(gpt2), 39419904)
eq("layer_params gpt2-124m", F.layer_params(gpt2), 7087872)

-- ---- activation memory ------------------------------------------------------------------------
-- tiny, B = 1, T = 4, fp32, naive attention: N = 4 tokens, C = 128 → an [N, C] buffer is
-- 4·128·4 = 2048 B; stats [N] (mean + rstd: 2·4·4 = 32 B) round up to 64 B (64-byte alignment).
-- Stored per layer between forward and backward: x 2048 + ln1 2048 + ln1 stats 64 + qkv
-- 4·384·4 = 6144 + atty 2048 + att 1·4·4·4·4 = 256 + xmid 2048 + ln2 2048 + ln2 stats 64 +
-- fch 4·512·4 = 8192 + fch_act 8192 = 33152 B  (attproj and fcproj die in the forward)
local fp32 = { act = 4, stat = 4, mm = 4 }
local a = F.activation_memory(tiny, 1, 4, { attention = "naive", recompute = "none", bytes = fp32 })
eq("act saved/layer tiny B1 T4 naive", a.saved_per_layer, 33152)
-- flash: att (256 B) replaced by the log-sum-exp [1, 4 heads, 4] fp32 = 64 B → 33152 − 256 + 64
eq("act saved/layer flash", F.activation_memory(tiny, 1, 4, { attention = "flash", bytes = fp32 }).saved_per_layer, 32960)
-- selective recompute (v2111): the attention matrix is not stored: 33152 − 256 = 32896
eq("act saved/layer selective", F.activation_memory(tiny, 1, 4, { attention = "naive", recompute = "selective", bytes = fp32 }).saved_per_layer, 32896)
-- full recompute (v2101): only the layer input x: 2048
eq("act saved/layer full", F.activation_memory(tiny, 1, 4, { attention = "naive", recompute = "full", bytes = fp32 }).saved_per_layer, 2048)

-- The CPU runtime's shape: tiny, B = 8, T = 256, fp32, naive (gen ... --batch 8 --seq 256).
-- N = 2048 tokens; one [N, C] buffer = 262144 floats. Per layer (floats):
--   x, ln1, atty, xmid, ln2: 5 · 262144 = 1310720; two layernorm stats 2·(2·2048) = 8192;
--   qkv 2048·384 = 786432; att 8·4·256·256 = 2097152; fch + fch_act 2·2048·512 = 2097152
--   = 6299648 floats per layer.
-- The peak is at the LM head's backward: every layer's saved buffers 4·6299648 = 25198592,
-- + x4 262144 + lnf 262144 + lnf stats 4096 + logits 2048·256 = 524288 + losses 2048
-- + d:lnf 262144 = 26515456 floats. The plan's greedy packing of the same lifetimes gives
-- act_bytes / 4 = 26777600 floats (1% fragmentation), checked by tests/gen/test_size.sh.
a = F.activation_memory(tiny, 8, 256, { attention = "naive", recompute = "none", bytes = fp32 })
eq("act saved/layer tiny B8 T256", a.saved_per_layer / 4, 6299648)
eq("act peak tiny B8 T256", a.peak / 4, 26515456)
eq("act peak at", a.peak_at, "lm head backward")
-- no reuse at all = the plan's act_bytes_unplanned / 4 (every buffer, its own memory) = 54040576
eq("act unplanned tiny B8 T256", a.unplanned / 4, 54040576)
-- recompute never raises the peak; flash never raises it either
local full = F.activation_memory(tiny, 8, 256, { attention = "naive", recompute = "full", bytes = fp32 })
ok("full recompute lowers the peak", full.peak < a.peak)
ok("flash lowers the peak", F.activation_memory(tiny, 8, 256, { attention = "flash", bytes = fp32 }).peak < a.peak)

-- ---- Chinchilla and cost --------------------------------------------------------------------
near("chinchilla tokens 20·N", F.chinchilla_tokens(124439808), 20 * 124439808)
-- C = 1.2e21 FLOPs: N = sqrt(1.2e21/120) = sqrt(1e19) = 3.16227766e9, D = 20·N
local co = F.compute_optimal(1.2e21)
near("compute-optimal N", co.params, math.sqrt(1e19))
near("compute-optimal D", co.tokens, 20 * math.sqrt(1e19))
-- 4.5e10 tokens at 125000 tokens/s per GPU, $2.50/GPU-hr:
--   1 GPU: 4.5e10/125000 = 360000 s = 100 h → $250; 2 GPUs: 50 h, 2·2.5·50 = $250 (linear scaling)
local c1 = F.train_cost(4.5e10, 125000, 1, 2.5)
local c2 = F.train_cost(4.5e10, 125000, 2, 2.5)
near("train 1 GPU hours", c1.hours, 100)
near("train 1 GPU cost", c1.usd, 250)
near("train 2 GPUs hours", c2.hours, 50)
near("train 2 GPUs cost = 1 GPU cost", c2.usd, 250)
near("train GPU-hours", c2.gpu_hours, 100)

-- ---- mixture of experts (model key `moe`, docs/moe.md) ---------------------------------------
-- tiny-moe by hand: attention per layer q 64·64 + k,v 2·32·64 + o 64·64 = 12288; 4 SwiGLU experts
-- of 3·64·128 = 24576 each = 98304; router 4·64 = 256; two RMSNorms 128 -> 110976 per layer;
-- × 2 = 221952 + embeddings 2·256·64 = 32768 + final norm 64 = 254784. Active: top-2 experts,
-- 2 fewer per layer: 254784 - 2·2·24576 = 156480.
local tinymoe = { name = "tiny-moe", arch = "llama", vocab_size = 256, context = 128, d_model = 64, n_layers = 2,
  n_heads = 4, n_kv_heads = 2, ffn_hidden = 128, norm = "rmsnorm", activation = "swiglu", position = "rope",
  tied_embeddings = false, bias = false, moe = { n_experts = 4, top_k = 2, router = "softmax", dropless = true } }
eq("param_count tiny-moe", F.param_count(tinymoe), 254784)
eq("active_param_count tiny-moe", F.active_param_count(tinymoe), 156480)
-- matmul params: active linear weights incl. router and head: 2·(12288 + 2·24576 + 256) + 256·64
eq("matmul_params tiny-moe", F.matmul_params(tinymoe), 2 * (12288 + 2 * 24576 + 256) + 256 * 64)
-- a shared expert and a dense first layer: layer 0 keeps the dense MLP (3·64·128), layer 1 has
-- 4 routed + 1 shared expert of 3·64·32 = 6144 and the router 256
tinymoe.moe = { n_experts = 4, top_k = 2, router = "sigmoid", dropless = true, n_shared_experts = 1,
  expert_hidden = 32, first_dense_layers = 1 }
eq("param_count tiny-moe shared+dense", F.param_count(tinymoe), 2 * (12288 + 128) + 24576 + 5 * 6144 + 256 + 32768 + 64)
eq("active_param_count tiny-moe shared+dense", F.active_param_count(tinymoe), 2 * (12288 + 128) + 24576 + 3 * 6144 + 256 + 32768 + 64)
-- ZeRO-3's gather unit is the largest layer: the MoE layer 1 (12288 + 128 + 5·6144 + 256 = 43392)
-- outweighs the dense layer 0 (12288 + 128 + 24576 = 36992), the untied head (256·64 + 64) and
-- the embedding (256·64)
eq("layer_params tiny-moe shared+dense", F.layer_params(tinymoe), 43392)
eq("gather_params tiny-moe shared+dense", F.gather_params(tinymoe), 43392)
-- the throughput model's compute term uses the active count when given
local th = { L = 1, d = 1, b = 2, k = 6, g = 1, alpha = 16, c = 6, B = 1e6, bg = 2, p = 1, peak_flops = 1e15,
  hbm_Bps = 1e12, nic_gbps = 0, ec = 1, em = 1, en = 1, N = 4e9 }
local dense_t = F.throughput(th)
th.Na = 1e9
eq("throughput compute term uses active params", F.throughput(th).flops_per_token, dense_t.flops_per_token / 4)

print(string.format("%d passed, %d failed", pass, fail))
os.exit(fail == 0 and 0 or 1)
