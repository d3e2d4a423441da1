--[[ hyperion template
family = "classifier"
doc = "fused classifier: softmax + cross-entropy + dlogits in place, one block per row, online softmax over vocabulary chunks"
constants = {
  V = { "int", doc = "vocabulary size (valid logit columns)" },
  VP = { "int", doc = "padded vocabulary (row stride of the logits; columns V..VP-1 are zeroed in the gradient)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "logits storage (v2102): f32, or bf16 (read into fp32, statistics and loss in fp32, dlogits rounded on store); losses and teacher logits stay fp32" },
  BLOCK = { "int", default = 512, doc = "threads per block (one row per block; 512 rather than 1024: ptxas is 25% faster without the 64-register cap, and a 50k row is still ~100 values per thread)" },
}
derive = function(K, decide)
  if K.VP < K.V then error("VP (" .. K.VP .. ") < V (" .. K.V .. ")") end
  K.VEC = K.VP % 4 == 0 and 4 or 1
  K.V4 = K.VEC == 4 and (K.V // 4) * 4 or 0 -- columns read as 16-byte vectors; the rest scalar
  decide("vector_width", K.VEC, K.VEC == 4 and "VP % 4 == 0: rows are 16-byte aligned, 16-byte loads up to V rounded down to 4" or "VP is not a multiple of 4: scalar loads")
  decide("rows_per_block", 1, "one block of BLOCK threads per row; each thread keeps a running (max, sum) over its chunk")
end
kernels = {
  { name = "crossentropy_fwd", doc = "losses[n] = logsumexp(logits[n, :V]) - logits[n, target]; 0 for target < 0, NaN for target >= V",
    params = { "float* __restrict__ losses", "const act_t* __restrict__ logits", "const int* __restrict__ targets", "int N" },
    block = "BLOCK", grid = "N" },
  { name = "crossentropy_fused", doc = "losses as crossentropy_fwd, and logits := dloss * (softmax - onehot) in place; padding and ignored rows 0",
    params = { "float* __restrict__ losses", "act_t* logits", "const int* __restrict__ targets", "float dloss", "int N" },
    block = "BLOCK", grid = "N" },
  { name = "crossentropy_fused_ext", doc = "crossentropy_fused with per-token gradient weights row_scale[n] (NULL: 1) and, given a teacher's logits (NULL: none), the distillation loss (1 - alpha) * CE + alpha * T^2 * KL(softmax(teacher / T) || softmax(logits / T)) with its gradient; three sweeps over vocabulary chunks",
    params = { "float* __restrict__ losses", "act_t* logits", "const int* __restrict__ targets", "float dloss",
      "const float* __restrict__ row_scale", "const float* __restrict__ teacher", "int TVP", "float temperature", "float alpha", "int N" },
    block = "BLOCK", grid = "N" },
}
ops = {
  crossentropy = { { "crossentropy_fwd", "out1", "in1", "in2", "N" } },
  crossentropy_fused = { { "crossentropy_fused", "out1", "out2", "in1", "dloss", "N" } },
  -- not a plan op: the device executor swaps it in for crossentropy_fused while a preference
  -- objective weights the rows or a distillation teacher is set (loss.* bindings: runtime/device)
  crossentropy_fused_ext = { { "crossentropy_fused_ext", "out1", "out2", "in1", "dloss", "loss.row_scale", "loss.teacher",
    "loss.teacher_vp", "loss.temperature", "loss.alpha", "N" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua): one row of VP
-- logits per block, read twice by the fused kernel (statistics, then the gradient in place)
-- every thread of a row's block loads the row's target and its logit z[target] (L1 hits)
cost = {
  crossentropy_fwd = function(a) local NV = a.N * a.V
    return { fp32 = 4 * NV, sfu = NV, rd = a.E * NV + 4 * a.N, wr = 4 * a.N, reread = (4 + a.E) * a.BLOCK * a.N - 4 * a.N } end,
  crossentropy_fused = function(a) local NV, NP = a.N * a.V, a.N * a.VP
    return { fp32 = 7 * NV, sfu = 2 * NV, rd = a.E * NV + 4 * a.N, wr = a.E * NP + 4 * a.N,
             reread = a.E * NV + (4 + a.E) * a.BLOCK * a.N - 4 * a.N } end,
  crossentropy_fused_ext = function(a) local NV, NP = a.N * a.V, a.N * a.VP
    return { fp32 = 7 * NV, sfu = 2 * NV, rd = a.E * NV + 4 * a.N, wr = a.E * NP + 4 * a.N,
             reread = a.E * NV + (4 + a.E) * a.BLOCK * a.N - 4 * a.N } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// Running softmax statistics: m the max seen, s = sum exp(x - m). Adding x rescales s when x
// raises the max (one exp either way); two partial states merge the same way.
struct SoftmaxState { float m, s; };
__device__ __forceinline__ void sm_add(SoftmaxState& st, float x) {
    if (x > st.m) { st.s = st.s * expf(st.m - x) + 1.0f; st.m = x; }
    else st.s += expf(x - st.m);
}
__device__ __forceinline__ SoftmaxState sm_merge(SoftmaxState a, SoftmaxState b) {
    if (a.s == 0.0f) return b; // empty (m = -inf)
    if (b.s == 0.0f) return a;
    float m = fmaxf(a.m, b.m);
    return SoftmaxState{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
// The row's statistics, known to every thread of the block.
__device__ __forceinline__ SoftmaxState row_stats(const act_t* z) {
    __shared__ float sm_m[32], sm_s[32];
    SoftmaxState st{__int_as_float(0xff800000), 0.0f};
% if VEC == 4 then
    for (int i = threadIdx.x * 4; i < V4; i += BLOCK * 4) {
        hyp_f128 x = hyp_load4(z + i);
        // one rescale per vector: 5 exps per 4 values, no branches
        float m = fmaxf(fmaxf(st.m, fmaxf(x[0], x[1])), fmaxf(x[2], x[3]));
        st.s = st.s * expf(st.m - m) + ((expf(x[0] - m) + expf(x[1] - m)) + (expf(x[2] - m) + expf(x[3] - m)));
        st.m = m;
    }
    for (int i = V4 + threadIdx.x; i < V; i += BLOCK) sm_add(st, hyp_ld(z + i));
% else
    for (int i = threadIdx.x; i < V; i += BLOCK) sm_add(st, hyp_ld(z + i));
% end
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        SoftmaxState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o)};
        st = sm_merge(st, other);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sm_m[warp] = st.m; sm_s[warp] = st.s; }
    __syncthreads();
    st = SoftmaxState{__int_as_float(0xff800000), 0.0f};
    for (int w = 0; w < BLOCK / 32; w++) st = sm_merge(st, SoftmaxState{sm_m[w], sm_s[w]}); // same order everywhere
    return st;
}

% if emit.crossentropy_fwd then
{{ signature("crossentropy_fwd") }} {
    const int n = blockIdx.x;
    if (n >= N) return;
    const int tg = targets[n];
    if (tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[n] = tg < 0 ? 0.0f : __int_as_float(0x7fc00000);
        return;
    }
    const act_t* z = logits + (long)n * VP;
    float ztg = hyp_ld(z + tg);
    SoftmaxState st = row_stats(z);
    if (threadIdx.x == 0) losses[n] = st.m + logf(st.s) - ztg;
}
% end

% if emit.crossentropy_fused then
// Two sweeps over the row: the running statistics, then dlogit = exp(z - max) * (dloss / sum),
// minus dloss at the target, written over the logit it came from.
{{ signature("crossentropy_fused") }} {
    const int n = blockIdx.x;
    if (n >= N) return;
    const int tg = targets[n];
    act_t* z = logits + (long)n * VP;
    if (tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[n] = tg < 0 ? 0.0f : __int_as_float(0x7fc00000);
        for (int i = threadIdx.x; i < VP; i += BLOCK) hyp_st(z + i, 0.0f);
        return;
    }
    float ztg = hyp_ld(z + tg); // read before any thread overwrites the row (row_stats has barriers)
    SoftmaxState st = row_stats(z);
    if (threadIdx.x == 0) losses[n] = st.m + logf(st.s) - ztg;
    const float k = dloss / st.s;
% if VEC == 4 then
    for (int i = threadIdx.x * 4; i < V4; i += BLOCK * 4) {
        hyp_f128 x = hyp_load4(z + i);
        hyp_f128 g = f128(expf(x[0] - st.m) * k, expf(x[1] - st.m) * k, expf(x[2] - st.m) * k, expf(x[3] - st.m) * k);
        const int d = tg - i; // the one-hot lands in this vector?
        if (d == 0) g[0] -= dloss; else if (d == 1) g[1] -= dloss; else if (d == 2) g[2] -= dloss; else if (d == 3) g[3] -= dloss;
        hyp_store4(z + i, g);
    }
    for (int i = V4 + threadIdx.x; i < VP; i += BLOCK) hyp_st(z + i, i < V ? expf(hyp_ld(z + i) - st.m) * k - (i == tg ? dloss : 0.0f) : 0.0f);
% else
    for (int i = threadIdx.x; i < VP; i += BLOCK) hyp_st(z + i, i < V ? expf(hyp_ld(z + i) - st.m) * k - (i == tg ? dloss : 0.0f) : 0.0f);
% end
}
% end

% if emit.crossentropy_fused_ext then
// Block-wide max and sum of a full block (BLOCK is a multiple of 32), known to every thread, in a
// fixed order; the shared array is free again on return. (hyp_block_max/sum of hyp/reduce.cuh
// handle partial warps too, and spill 20 bytes here under ptxas: not used.)
__device__ __forceinline__ float ext_block_max(float v) {
    __shared__ float sh_max[32];
    v = hyp_warp_max(v);
    if ((threadIdx.x & 31) == 0) sh_max[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = sh_max[0];
    for (int w = 1; w < BLOCK / 32; w++) r = fmaxf(r, sh_max[w]);
    __syncthreads();
    return r;
}
__device__ __forceinline__ float ext_block_sum(float v) {
    __shared__ float sh_sum[32];
    v = hyp_warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh_sum[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = sh_sum[0];
    for (int w = 1; w < BLOCK / 32; w++) r += sh_sum[w];
    __syncthreads();
    return r;
}

// Row n's gradient weight w = row_scale[n] (the preference objectives' -dL/dlogp of the row's
// sequence) multiplies dloss. Without a teacher: crossentropy_fused's two sweeps. With one (the
// teacher's row at teacher + n * TVP, the same V valid columns): sweep 1 the maxima of both rows,
// sweep 2 the three softmax sums (student, student / T, teacher / T), sweep 3 the KL terms and
// the gradient (1 - alpha) * (softmax(z) - onehot) + alpha * T * (softmax(z / T) - softmax(zt / T))
// written over the logits; the vocabulary is read in BLOCK-strided chunks, nothing per row is stored.
{{ signature("crossentropy_fused_ext") }} {
    const int n = blockIdx.x;
    if (n >= N) return;
    const int tg = targets[n];
    act_t* z = logits + (long)n * VP;
    if (tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[n] = tg < 0 ? 0.0f : __int_as_float(0x7fc00000);
        for (int i = threadIdx.x; i < VP; i += BLOCK) hyp_st(z + i, 0.0f);
        return;
    }
    const float dl = dloss * (row_scale ? row_scale[n] : 1.0f);
    const float ztg = hyp_ld(z + tg); // read before any thread overwrites the row (the reductions have barriers)
    if (!teacher) {
        SoftmaxState st = row_stats(z);
        if (threadIdx.x == 0) losses[n] = st.m + logf(st.s) - ztg;
        const float k = dl / st.s;
        for (int i = threadIdx.x; i < VP; i += BLOCK) hyp_st(z + i, i < V ? expf(hyp_ld(z + i) - st.m) * k - (i == tg ? dl : 0.0f) : 0.0f);
        return;
    }
    const float* zt = teacher + (long)n * TVP;
    const float inv_t = 1.0f / temperature;
    float m = __int_as_float(0xff800000), mt = m;
    for (int i = threadIdx.x; i < V; i += BLOCK) { m = fmaxf(m, hyp_ld(z + i)); mt = fmaxf(mt, zt[i]); }
    m = ext_block_max(m);
    mt = ext_block_max(mt);
    float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int i = threadIdx.x; i < V; i += BLOCK) {
        const float zi = hyp_ld(z + i);
        s1 += expf(zi - m);
        s2 += expf((zi - m) * inv_t);
        s3 += expf((zt[i] - mt) * inv_t);
    }
    s1 = ext_block_sum(s1);
    s2 = ext_block_sum(s2);
    s3 = ext_block_sum(s3);
    const float lz = m + logf(s1), la = logf(s2), lb = logf(s3);
    float kl = 0.0f;
    for (int i = threadIdx.x; i < VP; i += BLOCK) {
        if (i < V) {
            const float zi = hyp_ld(z + i), lps = (zi - m) * inv_t - la, lpt = (zt[i] - mt) * inv_t - lb, pt = expf(lpt);
            kl += pt * (lpt - lps);
            const float g = (1.0f - alpha) * (expf(zi - lz) - (i == tg ? 1.0f : 0.0f)) + alpha * temperature * (expf(lps) - pt);
            hyp_st(z + i, dl * g);
        } else {
            hyp_st(z + i, 0.0f);
        }
    }
    kl = ext_block_sum(kl);
    if (threadIdx.x == 0) losses[n] = (1.0f - alpha) * (lz - ztg) + alpha * temperature * temperature * kl;
}
% end
