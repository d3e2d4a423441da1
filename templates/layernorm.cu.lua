--[[ hyperion template
family = "layernorm"
doc = "LayerNorm over C (biased variance, two-pass), plain and fused with the residual add; backward with deterministic dw/db"
constants = {
  C = { "int", doc = "normalized width" },
  EPS = { "float", default = 1e-5, doc = "added to the variance" },
  BLOCK = { "int", default = 256, doc = "threads per block (one warp per row in the row kernels)" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 loaded into fp32 and rounded on store (w, b, mean, rstd and the dw/db partials stay fp32)" },
  SEGS = { "int", default = 64, doc = "row segments of the dw/db reduction (partials in a scratch of 2*SEGS*C floats)" },
}
derive = function(K, decide)
  K.VEC = K.C % 4 == 0 and 4 or 1
  K.ROWS = K.BLOCK // 32
  decide("vector_width", K.VEC, K.VEC == 4 and "C % 4 == 0: 16-byte loads" or "C is not a multiple of 4: scalar loads")
  decide("rows_per_block", K.ROWS, "one warp per row, BLOCK/32 rows per block")
  decide("dw_segments", K.SEGS, "dw/db: SEGS row segments x 32-column strips write partials, a second kernel sums them in order (deterministic, no atomics)")
end
kernels = {
  { name = "layernorm_fwd", doc = "out = (x - mean) * rstd * w + b; saves mean, rstd [N]; b may be NULL",
    params = { "act_t* __restrict__ out", "float* __restrict__ mean", "float* __restrict__ rstd",
               "const act_t* __restrict__ inp", "const float* __restrict__ w", "const float* __restrict__ b", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "residual_layernorm_fwd", doc = "resid = a + r, then layernorm_fwd(resid) in the same pass",
    params = { "act_t* __restrict__ resid", "act_t* __restrict__ out", "float* __restrict__ mean", "float* __restrict__ rstd",
               "const act_t* __restrict__ a", "const act_t* __restrict__ r",
               "const float* __restrict__ w", "const float* __restrict__ b", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "layernorm_bwd_dx", doc = "dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ w", "const float* __restrict__ mean", "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "residual_layernorm_bwd_dx", doc = "dinp += layernorm input gradient + dres (the residual branch's gradient)",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dres", "const act_t* __restrict__ dout",
               "const act_t* __restrict__ inp", "const float* __restrict__ w", "const float* __restrict__ mean",
               "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "layernorm_bwd_dw", doc = "partial[s] = (sum dout * xhat, sum dout) over the rows of segment s, per column",
    params = { "float* __restrict__ partial", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ mean", "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(C, 32), SEGS" },
  { name = "layernorm_bwd_dw_finish", doc = "dw += sum_s partial[s][0], db += sum_s partial[s][1], s ascending; db may be NULL",
    params = { "float* __restrict__ dw", "float* __restrict__ db", "const float* __restrict__ partial" },
    block = "BLOCK", grid = "cdiv(C, BLOCK)" },
}
ops = {
  layernorm_fwd = { { "layernorm_fwd", "out1", "out2", "out3", "in1", "in2", "in3", "N" } },
  layernorm_bwd = { { "layernorm_bwd_dx", "out1", "in1", "in2", "in3", "in4", "in5", "N" },
                    { "layernorm_bwd_dw", "scratch(2*SEGS*C)", "in1", "in2", "in4", "in5", "N" },
                    { "layernorm_bwd_dw_finish", "out2", "out3", "scratch(2*SEGS*C)" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua). The row
-- kernels read x three times (mean, variance, normalize) and w, b once per row: DRAM sees x once
-- and w, b once (the rest hits L1/L2, `reread`); per-row mean/rstd loads are by all 32 lanes.
cost = {
  layernorm_fwd = function(a) local NC = a.N * a.C
    return { fp32 = 9 * NC, sfu = 2 * a.N, rd = a.E * NC + 8 * a.C, wr = a.E * NC + 8 * a.N,
             reread = 2 * a.E * NC + 8 * NC - 8 * a.C } end,
  residual_layernorm_fwd = function(a) local NC = a.N * a.C
    return { fp32 = 10 * NC, sfu = 2 * a.N, rd = 2 * a.E * NC + 8 * a.C, wr = 2 * a.E * NC + 8 * a.N,
             reread = 3 * a.E * NC + 8 * NC - 8 * a.C } end,
  layernorm_bwd_dx = function(a) local NC = a.N * a.C
    return { fp32 = 20 * NC, rd = 3 * a.E * NC + 4 * a.C + 8 * a.N, wr = a.E * NC,
             reread = 2 * a.E * NC + 8 * NC - 4 * a.C + 8 * 31 * a.N } end,
  residual_layernorm_bwd_dx = function(a) local NC = a.N * a.C
    return { fp32 = 21 * NC, rd = 4 * a.E * NC + 4 * a.C + 8 * a.N, wr = a.E * NC,
             reread = 2 * a.E * NC + 8 * NC - 4 * a.C + 8 * 31 * a.N } end,
  layernorm_bwd_dw = function(a) local NC = a.N * a.C
    return { fp32 = 6 * NC, rd = 2 * a.E * NC + 8 * a.N, wr = 8 * a.SEGS * a.C, reread = 8 * NC - 8 * a.N } end,
  layernorm_bwd_dw_finish = function(a)
    return { fp32 = 2 * 2 * a.SEGS * a.C, rd = 8 * a.SEGS * a.C + 8 * a.C, wr = 8 * a.C } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// Row kernels: warp `threadIdx.x / 32` of the block handles row n; lane l holds the columns
// l*VEC + k*32*VEC. Reductions are warp shuffles (fixed order).
#define FOR_ROW(c) for (int c = (threadIdx.x & 31) * VEC; c < C; c += 32 * VEC)

__device__ __forceinline__ float row_sum(const act_t* x) {
    float s = 0.0f;
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 v = hyp_load4(x + c);
        s += (v[0] + v[1]) + (v[2] + v[3]);
% else
        s += hyp_ld(x + c);
% end
    }
    return hyp_warp_sum(s);
}
__device__ __forceinline__ float row_var(const act_t* x, float m) {
    float s = 0.0f;
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 v = hyp_load4(x + c);
        float a = v[0] - m, b = v[1] - m, d = v[2] - m, e = v[3] - m;
        s += (a * a + b * b) + (d * d + e * e);
% else
        float a = hyp_ld(x + c) - m;
        s += a * a;
% end
    }
    return hyp_warp_sum(s);
}
// out = (x - m) * r * w + b, with the statistics saved by lane 0
__device__ __forceinline__ void ln_normalize(act_t* o, const act_t* x, const float* w, const float* b,
                                             float* mean, float* rstd, int n) {
    float m = row_sum(x) / C;
    float r = 1.0f / sqrtf(row_var(x, m) / C + EPS);
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 v = hyp_load4(x + c), ww = hyp_load128(w + c);
        hyp_f128 bb = b ? hyp_load128(b + c) : f128(0.0f, 0.0f, 0.0f, 0.0f);
        hyp_store4(o + c, f128((v[0] - m) * r * ww[0] + bb[0], (v[1] - m) * r * ww[1] + bb[1],
                          (v[2] - m) * r * ww[2] + bb[2], (v[3] - m) * r * ww[3] + bb[3]));
% else
        hyp_st(o + c, (hyp_ld(x + c) - m) * r * w[c] + (b ? b[c] : 0.0f));
% end
    }
    if ((threadIdx.x & 31) == 0) {
        if (mean) mean[n] = m;
        rstd[n] = r;
    }
}

% if emit.layernorm_fwd then
{{ signature("layernorm_fwd") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    ln_normalize(out + (long)n * C, inp + (long)n * C, w, b, mean, rstd, n);
}
% end

% if emit.residual_layernorm_fwd then
// The residual add and the norm in one pass over the row: resid is written, then re-read by the
// same lanes (same columns, same thread: no barrier needed) for the statistics and the output.
{{ signature("residual_layernorm_fwd") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 x = hyp_load4(a + off + c), y = hyp_load4(r + off + c);
        hyp_store4(resid + off + c, f128(x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]));
% else
        hyp_st(resid + off + c, hyp_ld(a + off + c) + hyp_ld(r + off + c));
% end
    }
    ln_normalize(out + off, resid + off, w, b, mean, rstd, n);
}
% end

% if emit.layernorm_bwd_dx or emit.residual_layernorm_bwd_dx then
// dx += r * (g - mean(g) - xhat * mean(g * xhat)) (+ dres), g = dout * w, xhat = (x - m) * r
__device__ __forceinline__ void ln_backward_row(act_t* dx, const act_t* dres, const act_t* d, const act_t* x,
                                                const float* w, float m, float r) {
    float sg = 0.0f, sgx = 0.0f;
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 dd = hyp_load4(d + c), xx = hyp_load4(x + c), ww = hyp_load128(w + c);
        float g0 = dd[0] * ww[0], g1 = dd[1] * ww[1], g2 = dd[2] * ww[2], g3 = dd[3] * ww[3];
        sg += (g0 + g1) + (g2 + g3);
        sgx += (g0 * (xx[0] - m) * r + g1 * (xx[1] - m) * r) + (g2 * (xx[2] - m) * r + g3 * (xx[3] - m) * r);
% else
        float g = hyp_ld(d + c) * w[c];
        sg += g;
        sgx += g * (hyp_ld(x + c) - m) * r;
% end
    }
    sg = hyp_warp_sum(sg) / C;
    sgx = hyp_warp_sum(sgx) / C;
    FOR_ROW(c) {
% if VEC == 4 then
        hyp_f128 dd = hyp_load4(d + c), xx = hyp_load4(x + c), ww = hyp_load128(w + c), o = hyp_load4(dx + c);
        hyp_f128 e = dres ? hyp_load4(dres + c) : f128(0.0f, 0.0f, 0.0f, 0.0f);
        o[0] += r * (dd[0] * ww[0] - sg - (xx[0] - m) * r * sgx) + e[0];
        o[1] += r * (dd[1] * ww[1] - sg - (xx[1] - m) * r * sgx) + e[1];
        o[2] += r * (dd[2] * ww[2] - sg - (xx[2] - m) * r * sgx) + e[2];
        o[3] += r * (dd[3] * ww[3] - sg - (xx[3] - m) * r * sgx) + e[3];
        hyp_store4(dx + c, o);
% else
        hyp_st(dx + c, hyp_ld(dx + c) + (r * (hyp_ld(d + c) * w[c] - sg - (hyp_ld(x + c) - m) * r * sgx) + (dres ? hyp_ld(dres + c) : 0.0f)));
% end
    }
}
% end

% if emit.layernorm_bwd_dx then
{{ signature("layernorm_bwd_dx") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    ln_backward_row(dinp + off, nullptr, dout + off, inp + off, w, mean[n], rstd[n]);
}
% end

% if emit.residual_layernorm_bwd_dx then
{{ signature("residual_layernorm_bwd_dx") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    ln_backward_row(dinp + off, dres + off, dout + off, inp + off, w, mean[n], rstd[n]);
}
% end

% if emit.layernorm_bwd_dw then
// Block (strip, s): columns [32*strip, +32) of the rows in segment s; thread (lane, ty) sums rows
// ty, ty + ROWS, ... of the segment; the ROWS partial sums are then added in ty order.
{{ signature("layernorm_bwd_dw") }} {
    __shared__ float sw[ROWS][33], sb[ROWS][33];
    const int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int c = blockIdx.x * 32 + lane;
    const int per = (N + SEGS - 1) / SEGS, n0 = blockIdx.y * per, n1 = min(N, n0 + per);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int n = n0 + ty; n < n1; n += ROWS) {
            float d = hyp_ld(dout + (long)n * C + c);
            aw += d * (hyp_ld(inp + (long)n * C + c) - mean[n]) * rstd[n];
            ab += d;
        }
    }
    sw[ty][lane] = aw;
    sb[ty][lane] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < ROWS; k++) { aw += sw[k][lane]; ab += sb[k][lane]; }
        partial[(2L * blockIdx.y) * C + c] = aw;
        partial[(2L * blockIdx.y + 1) * C + c] = ab;
    }
}
% end

% if emit.layernorm_bwd_dw_finish then
{{ signature("layernorm_bwd_dw_finish") }} {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int s = 0; s < SEGS; s++) {
        aw += partial[(2L * s) * C + c];
        ab += partial[(2L * s + 1) * C + c];
    }
    if (dw) dw[c] += aw;
    if (db) db[c] += ab;
}
% end
