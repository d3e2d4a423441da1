--[[ hyperion template
family = "global_norm"
doc = "global gradient norm over the gradient arena: deterministic two-pass reduction, and the clip factor AdamW reads"
constants = {
  PARTS = { "int", default = 512, doc = "blocks of the first pass (a fixed number: the summation order never depends on the device)" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
}
derive = function(K, decide)
  decide("partials", K.PARTS, "first pass: PARTS blocks, grid-stride over 16-byte vectors, fp32 per thread; second pass sums the partials in order in double")
end
kernels = {
  { name = "global_norm_partial", doc = "partial[b] = sum of g^2 over block b's grid-stride share of n values",
    params = { "float* __restrict__ partial", "const float* __restrict__ g", "long n" },
    block = "BLOCK", grid = "PARTS" },
  { name = "global_norm_finish", doc = "out[0] = ||g|| = sqrt(sum partial); out[1] = clip factor (max_norm / (norm + 1e-6) if norm > max_norm > 0, else 1)",
    params = { "float* __restrict__ out", "const float* __restrict__ partial", "float max_norm" },
    block = 32, grid = "1" },
}
ops = {
  grad_norm = { { "global_norm_partial", "scratch(PARTS)", "grads", "n" }, { "global_norm_finish", "gnorm", "scratch(PARTS)", "max_norm" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua)
cost = {
  global_norm_partial = function(a) return { fp32 = 2 * a.n, rd = 4 * a.n, wr = 4 * a.PARTS } end,
  global_norm_finish = function(a) return { fp32 = 2 * a.PARTS, sfu = 2, rd = 4 * a.PARTS, wr = 8 } end,
}
]]
{{ partial("common") }}

% if emit.global_norm_partial then
{{ signature("global_norm_partial") }} {
    float s = 0.0f;
    const long nv = n / 4, stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        hyp_f128 x = hyp_load128(g + 4 * i);
        s += (x[0] * x[0] + x[1] * x[1]) + (x[2] * x[2] + x[3] * x[3]);
    }
    if (blockIdx.x == 0) // the tail of up to 3 values
        for (long i = 4 * nv + threadIdx.x; i < n; i += blockDim.x) s += g[i] * g[i];
    s = hyp_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
% end

% if emit.global_norm_finish then
{{ signature("global_norm_finish") }} {
    if (threadIdx.x != 0) return;
    double sum = 0.0;
    for (int b = 0; b < PARTS; b++) sum += (double)partial[b];
    double norm = sqrt(sum);
    out[0] = (float)norm;
    out[1] = (max_norm <= 0.0f || !(norm > (double)max_norm)) ? 1.0f : (float)((double)max_norm / (norm + 1e-6));
}
% end
