--[[ hyperion template
family = "quant"
doc = "integer quantization: fake quantization with per-group absmax scales (QAT, straight-through backward) and int8 GEMMs with per-row/per-tensor scales, exact int32 accumulation and a dequantizing epilogue"
constants = {
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
kernels = {
  { name = "fake_quant", doc = "out[r, group g] = clamp(rne(in / s), -qmax-1, qmax) * s, s = max|in over the group| / qmax, qmax = 2^(bits-1)-1 (runtime/cpu/quant.h; out may be in); one block per (row, group)",
    params = { "float* out", "const float* in", "long rows", "int C", "int bits", "int group" },
    block = "BLOCK", grid = "n*cdiv(C, group)" },
  { name = "int8_scale", doc = "scale[r] = max|x[r, :]| / 127 (rowwise: one block per row), or scale[0] = max|x| / 127 over the whole tensor (block 0)",
    params = { "float* __restrict__ scale", "const float* __restrict__ x", "long rows", "int cols", "int rowwise" },
    block = "BLOCK", grid = "rows" },
  { name = "int8_quantize", doc = "q = clamp(rne(x / s), -127, 127) with s = scale[row] (rowwise) or scale[0]; 0 where s is 0",
    params = { "signed char* __restrict__ q", "const float* __restrict__ scale", "const float* __restrict__ x", "long rows", "int cols", "int rowwise" },
    block = "BLOCK", grid = "cdiv(rows*cols, BLOCK)" },
  { name = "int8_gemm", doc = "out[m, n] = fmaf(acc, sa[m or 0] * sb[0], accumulate ? out : bias ? bias[n] : 0), acc = sum_k a[m, k] * b (int32, exact): b is [N, K] (tb) or [K, N]",
    params = { "float* out", "const signed char* __restrict__ a", "const float* __restrict__ sa", "const signed char* __restrict__ b",
               "const float* __restrict__ sb", "const float* __restrict__ bias", "long M", "int N", "int K", "int tb", "int rowwise", "int accumulate" },
    block = "BLOCK", grid = "cdiv(M*N, BLOCK)" },
}
-- fake_quant (v2158): weights [OC][IC] (n = OC, C = IC, group = the columns sharing one scale) and
-- layer inputs [N][IC] (8 bits, one group per row). The backward is the straight-through
-- estimator: the GEMM's backward reads the quantized copy, so the gradient reaches the fp32
-- weight unchanged (no op).
-- int8_matmul_fwd / int8_matmul_dgrad (v2159): the operands quantized into scratch (int8 values
-- and their scales), then one exact int32 GEMM with the dequantizing epilogue. The forward adds
-- the bias; the input gradient accumulates into dx, as every backward does.
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua; has_X: pointer
-- argument X is given, not NULL). fake_quant: a block per (row, group) reads its values twice (the
-- max, then the quantization: the second from L1/L2) and writes them; the IEEE division per value
-- counted as one special-function op plus its Newton steps. int8_scale: one block per row
-- (rowwise), or block 0 alone over the whole tensor (one SM: the roofline is optimistic there).
-- int8_quantize: 4-byte loads, 1-byte stores, the scale loaded per element (L1). int8_gemm, a
-- scalar reference kernel (one thread per output, no tensor cores): 2 integer ops per
-- multiply-add on the IMAD pipe, which issues at half the FP32 FMA rate on sm_80/sm_90 (CUDA C
-- Programming Guide, arithmetic instruction throughput: 64 vs 128 results per clock per SM), so
-- declared as 4 M N K fp32-pipe FLOPs; A and B from DRAM once, their re-reads by the other
-- threads from L1/L2; the scales per thread; out read when accumulating, bias per thread
cost = {
  fake_quant = function(a) local n = a.rows * a.C
    return { fp32 = 8 * n, sfu = n, rd = 4 * n, wr = 4 * n, reread = 4 * n } end,
  int8_scale = function(a) local n = a.rows * a.cols
    return { fp32 = 2 * n, rd = 4 * n, wr = a.rowwise ~= 0 and 4 * a.rows or 4 } end,
  int8_quantize = function(a) local n = a.rows * a.cols
    return { fp32 = 8 * n, sfu = n, rd = 4 * n, wr = n, reread = 4 * n } end,
  int8_gemm = function(a) local MN = a.M * a.N
    local ab = a.M * a.K + a.K * a.N
    local sa = a.rowwise ~= 0 and 4 * a.M or 4
    local bias = (a.accumulate == 0 and a.has_bias) and 4 * MN or 0
    return { fp32 = 4.0 * MN * a.K + 2 * MN, rd = ab + sa + 4 + (a.accumulate ~= 0 and 4 * MN or 0) + (bias > 0 and 4 * a.N or 0),
             wr = 4 * MN, reread = 2.0 * MN * a.K - ab + 8 * MN - sa - 4 + (bias > 0 and bias - 4 * a.N or 0) } end,
}
ops = {
  fake_quant = { { "fake_quant", "out1", "in1", "n", "C", "bits", "group" } },
  int8_matmul_fwd = {
    { "int8_scale", "scratch(N)", "in1", "N", "IC", "rowwise" },
    { "int8_quantize", "scratch(N*IC)", "scratch(N)", "in1", "N", "IC", "rowwise" },
    { "int8_scale", "scratch(1)", "in2", "OC", "IC", "0" },
    { "int8_quantize", "scratch(OC*IC)", "scratch(1)", "in2", "OC", "IC", "0" },
    { "int8_gemm", "out1", "scratch(N*IC)", "scratch(N)", "scratch(OC*IC)", "scratch(1)", "in3", "N", "OC", "IC", "1", "rowwise", "0" } },
  int8_matmul_dgrad = {
    { "int8_scale", "scratch(N)", "in1", "N", "OC", "rowwise" },
    { "int8_quantize", "scratch(N*OC)", "scratch(N)", "in1", "N", "OC", "rowwise" },
    { "int8_scale", "scratch(1)", "in2", "OC", "IC", "0" },
    { "int8_quantize", "scratch(OC*IC)", "scratch(1)", "in2", "OC", "IC", "0" },
    { "int8_gemm", "out1", "scratch(N*OC)", "scratch(N)", "scratch(OC*IC)", "scratch(1)", "0", "N", "IC", "OC", "0", "rowwise", "1" } },
}
]]
{{ partial("common") }}

// Every rounding below is the one runtime/cpu/quant.c does (quant.h states them): a quotient by
// the scale (IEEE division), rounded to nearest even, clamped; the epilogue one fmaf.

% if emit.fake_quant then
{{ signature("fake_quant") }} {
    const int ng = (C + group - 1) / group;
    const long r = (long)blockIdx.x / ng;
    const int g = (int)((long)blockIdx.x % ng);
    if (r >= rows) return;
    const int c0 = g * group, len = C - c0 < group ? C - c0 : group;
    const float* x = in + r * C + c0;
    float* o = out + r * C + c0;
    float m = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, fabsf(x[i]));
    const float qmax = (float)((1 << (bits - 1)) - 1);
    const float s = hyp_block_max(m) / qmax;
    __syncthreads(); // every thread has read the maximum before any writes (out may be in)
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        if (!(s > 0.0f)) { o[i] = 0.0f; continue; }
        float q = (float)__float2int_rn(x[i] / s);
        q = q < -qmax - 1.0f ? -qmax - 1.0f : q > qmax ? qmax : q;
        o[i] = q * s;
    }
}
% end

% if emit.int8_scale then
{{ signature("int8_scale") }} {
    const long r = blockIdx.x;
    if (!rowwise && r > 0) return; // uniform per block
    const long n = rowwise ? (long)cols : rows * cols;
    const float* xr = x + (rowwise ? r * cols : 0);
    float m = 0.0f;
    for (long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(xr[i]));
    m = hyp_block_max(m);
    if (threadIdx.x == 0) scale[rowwise ? r : 0] = m / 127.0f;
}
% end

% if emit.int8_quantize then
{{ signature("int8_quantize") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const float s = scale[rowwise ? i / cols : 0];
    float v = s > 0.0f ? (float)__float2int_rn(x[i] / s) : 0.0f;
    v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
    q[i] = (signed char)(int)v;
}
% end

% if emit.int8_gemm then
// One thread per output element: the int32 sum is exact in any order, so this reference is
// bit-identical to any int8 GEMM (oneDNN's VNNI kernels on cpu, cuBLASLt's IMMA on a GPU).
{{ signature("int8_gemm") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * N) return;
    const long m = i / N;
    const int n = (int)(i % N);
    const signed char* ar = a + m * K;
    int acc = 0;
    if (tb) {
        const signed char* br = b + (long)n * K;
        for (int k = 0; k < K; k++) acc += (int)ar[k] * (int)br[k];
    } else {
        for (int k = 0; k < K; k++) acc += (int)ar[k] * (int)b[(long)k * N + n];
    }
    const float s = (rowwise ? sa[m] : sa[0]) * sb[0];
    out[i] = fmaf((float)acc, s, accumulate ? out[i] : bias ? bias[n] : 0.0f);
}
% end
