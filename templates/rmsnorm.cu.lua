--[[ hyperion template
family = "rmsnorm"
doc = "RMSNorm over C, plain and fused with the residual add, and QK-norm (RMSNorm of every q and k head); deterministic dw"
constants = {
  C = { "int", default = 0, doc = "normalized width of the rmsnorm kernels (0: none rendered)" },
  EPS = { "float", default = 1e-5, doc = "added to the mean square" },
  NH = { "int", default = 0, doc = "query heads (qknorm kernels)" },
  NKV = { "int", default = 0, doc = "key/value heads (qknorm kernels)" },
  HD = { "int", default = 0, doc = "head dim (qknorm kernels)" },
  QK_EPS = { "float", default = 1e-5, doc = "QK-norm epsilon" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): f32, or bf16 loaded into fp32 and rounded on store (weights, rstd and the dw partials stay fp32)" },
  BLOCK = { "int", default = 256, doc = "threads per block (one warp per row in the row kernels)" },
  SEGS = { "int", default = 64, doc = "row segments of the dw reductions (scratch: SEGS*C or 2*SEGS*HD floats)" },
}
derive = function(K, decide)
  K.VEC = K.C % 4 == 0 and 4 or 1
  K.HVEC = K.HD % 4 == 0 and 4 or 1
  K.ROWS = K.BLOCK // 32
  K.NQK = K.NH + K.NKV
  K.R = (K.NH + 2 * K.NKV) * K.HD
  if K.C > 0 then decide("vector_width", K.VEC, K.VEC == 4 and "C % 4 == 0: 16-byte loads" or "C is not a multiple of 4: scalar loads") end
  if K.HD > 0 then decide("qk_vector_width", K.HVEC, K.HVEC == 4 and "HD % 4 == 0: 16-byte loads" or "HD is not a multiple of 4: scalar loads") end
  decide("dw_segments", K.SEGS, "dw: SEGS row segments x 32-column strips write partials, a second kernel sums them in order (deterministic, no atomics)")
end
local function has_c(K) return K.C > 0 end
local function has_qk(K) return K.HD > 0 end
kernels = {
  { name = "rmsnorm_fwd", when = has_c, doc = "out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + EPS) saved [N]",
    params = { "act_t* __restrict__ out", "float* __restrict__ rstd", "const act_t* __restrict__ inp",
               "const float* __restrict__ w", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "residual_rmsnorm_fwd", when = has_c, doc = "resid = a + r, then rmsnorm_fwd(resid) in the same pass",
    params = { "act_t* __restrict__ resid", "act_t* __restrict__ out", "float* __restrict__ rstd",
               "const act_t* __restrict__ a", "const act_t* __restrict__ r", "const float* __restrict__ w", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "rmsnorm_bwd_dx", when = has_c, doc = "dinp += rstd * (g - xhat * mean(g * xhat)), g = dout * w",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ w", "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "residual_rmsnorm_bwd_dx", when = has_c, doc = "dinp += rmsnorm input gradient + dres",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dres", "const act_t* __restrict__ dout",
               "const act_t* __restrict__ inp", "const float* __restrict__ w", "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(N, ROWS)" },
  { name = "rmsnorm_bwd_dw", when = has_c, doc = "partial[s] = sum dout * xhat over the rows of segment s, per column",
    params = { "float* __restrict__ partial", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(C, 32), SEGS" },
  { name = "rmsnorm_bwd_dw_finish", when = has_c, doc = "dw += sum_s partial[s], s ascending",
    params = { "float* __restrict__ dw", "const float* __restrict__ partial" },
    block = "BLOCK", grid = "cdiv(C, BLOCK)" },
  { name = "qknorm_fwd", when = has_qk, doc = "RMSNorm of each q head (qw) and k head (kw) over HD; v copied; rstd [N, NH+NKV]",
    params = { "act_t* __restrict__ out", "float* __restrict__ rstd", "const act_t* __restrict__ inp",
               "const float* __restrict__ qw", "const float* __restrict__ kw", "int N" },
    block = "BLOCK", grid = "cdiv(N*(NH+2*NKV), ROWS)" },
  { name = "qknorm_bwd_dx", when = has_qk, doc = "per head: dinp += rstd * (g - xhat * mean(g * xhat)); v: dinp += dout",
    params = { "act_t* __restrict__ dinp", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ qw", "const float* __restrict__ kw", "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(N*(NH+2*NKV), ROWS)" },
  { name = "qknorm_bwd_dw", when = has_qk, doc = "partial[s] = (sum over q heads, sum over k heads) of dout * xhat in segment s",
    params = { "float* __restrict__ partial", "const act_t* __restrict__ dout", "const act_t* __restrict__ inp",
               "const float* __restrict__ rstd", "int N" },
    block = "BLOCK", grid = "cdiv(HD, 32), SEGS" },
  { name = "qknorm_bwd_dw_finish", when = has_qk, doc = "dqw += sum_s partial[s][0], dkw += sum_s partial[s][1]",
    params = { "float* __restrict__ dqw", "float* __restrict__ dkw", "const float* __restrict__ partial" },
    block = "BLOCK", grid = "cdiv(HD, BLOCK)" },
}
ops = {
  rmsnorm_fwd = { { "rmsnorm_fwd", "out1", "out2", "in1", "in2", "N" } },
  rmsnorm_bwd = { { "rmsnorm_bwd_dx", "out1", "in1", "in2", "in3", "in4", "N" },
                  { "rmsnorm_bwd_dw", "scratch(SEGS*C)", "in1", "in2", "in4", "N" },
                  { "rmsnorm_bwd_dw_finish", "out2", "scratch(SEGS*C)" } },
  qknorm_fwd = { { "qknorm_fwd", "out1", "out2", "in1", "in2", "in3", "N" } },
  qknorm_bwd = { { "qknorm_bwd_dx", "out1", "in1", "in2", "in3", "in4", "in5", "N" },
                 { "qknorm_bwd_dw", "scratch(2*SEGS*HD)", "in1", "in2", "in5", "N" },
                 { "qknorm_bwd_dw_finish", "out2", "out3", "scratch(2*SEGS*HD)" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua): as layernorm's,
-- one statistic less (x read twice in the forward: mean square, normalize)
cost = {
  rmsnorm_fwd = function(a) local NC = a.N * a.C
    return { fp32 = 5 * NC, sfu = a.N, rd = a.E * NC + 4 * a.C, wr = a.E * NC + 4 * a.N, reread = a.E * NC + 4 * NC - 4 * a.C } end,
  residual_rmsnorm_fwd = function(a) local NC = a.N * a.C
    return { fp32 = 6 * NC, sfu = a.N, rd = 2 * a.E * NC + 4 * a.C, wr = 2 * a.E * NC + 4 * a.N, reread = 2 * a.E * NC + 4 * NC - 4 * a.C } end,
  rmsnorm_bwd_dx = function(a) local NC = a.N * a.C
    return { fp32 = 14 * NC, rd = 3 * a.E * NC + 4 * a.C + 4 * a.N, wr = a.E * NC, reread = 2 * a.E * NC + 8 * NC - 4 * a.C + 4 * 31 * a.N } end,
  residual_rmsnorm_bwd_dx = function(a) local NC = a.N * a.C
    return { fp32 = 15 * NC, rd = 4 * a.E * NC + 4 * a.C + 4 * a.N, wr = a.E * NC, reread = 2 * a.E * NC + 8 * NC - 4 * a.C + 4 * 31 * a.N } end,
  rmsnorm_bwd_dw = function(a) local NC = a.N * a.C
    return { fp32 = 4 * NC, rd = 2 * a.E * NC + 4 * a.N, wr = 4 * a.SEGS * a.C, reread = 4 * NC - 4 * a.N } end,
  rmsnorm_bwd_dw_finish = function(a) return { fp32 = 2 * a.SEGS * a.C, rd = 4 * a.SEGS * a.C + 4 * a.C, wr = 4 * a.C } end,
  -- QK norm: one warp per (row, head); q and k heads read x twice and w once, v heads are copied
  qknorm_fwd = function(a) local NQK = a.NH + a.NKV; local qk, v = a.N * NQK * a.HD, a.N * a.NKV * a.HD
    return { fp32 = 5 * qk, sfu = a.N * NQK, rd = a.E * (qk + v) + 8 * a.HD, wr = a.E * (qk + v) + 4 * a.N * NQK,
             reread = a.E * qk + 4 * qk - 8 * a.HD } end,
  qknorm_bwd_dx = function(a) local NQK = a.NH + a.NKV; local qk, v = a.N * NQK * a.HD, a.N * a.NKV * a.HD
    return { fp32 = 14 * qk + v, rd = 3 * a.E * qk + 8 * a.HD + 4 * a.N * NQK + 2 * a.E * v, wr = a.E * (qk + v),
             reread = 2 * a.E * qk + 8 * qk - 8 * a.HD + 4 * 31 * a.N * NQK } end,
  qknorm_bwd_dw = function(a) local qk = a.N * (a.NH + a.NKV) * a.HD
    return { fp32 = 4 * qk, rd = 2 * a.E * qk + 4 * a.N * (a.NH + a.NKV), wr = 8 * a.SEGS * a.HD,
             reread = 4 * qk - 4 * a.N * (a.NH + a.NKV) } end,
  qknorm_bwd_dw_finish = function(a) return { fp32 = 4 * a.SEGS * a.HD, rd = 8 * a.SEGS * a.HD + 8 * a.HD, wr = 8 * a.HD } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

// Row kernels: one warp per row; lane l holds the elements l*V + k*32*V (V the vector width).
// Sum of squares, the normalize pass and the backward of one row of `len` floats:
template <int LEN, int V>
__device__ __forceinline__ float row_sumsq(const act_t* x) {
    float s = 0.0f;
    for (int c = (threadIdx.x & 31) * V; c < LEN; c += 32 * V) {
        if (V == 4) {
            hyp_f128 v = hyp_load4(x + c);
            s += (v[0] * v[0] + v[1] * v[1]) + (v[2] * v[2] + v[3] * v[3]);
        } else {
            const float xc = hyp_ld(x + c);
            s += xc * xc;
        }
    }
    return hyp_warp_sum(s);
}
template <int LEN, int V>
__device__ __forceinline__ float rms_normalize(act_t* o, const act_t* x, const float* w, float eps) {
    float r = 1.0f / sqrtf(row_sumsq<LEN, V>(x) / LEN + eps);
    for (int c = (threadIdx.x & 31) * V; c < LEN; c += 32 * V) {
        if (V == 4) {
            hyp_f128 v = hyp_load4(x + c), ww = hyp_load128(w + c);
            hyp_store4(o + c, f128(v[0] * r * ww[0], v[1] * r * ww[1], v[2] * r * ww[2], v[3] * r * ww[3]));
        } else {
            hyp_st(o + c, hyp_ld(x + c) * r * w[c]);
        }
    }
    return r;
}
// dx += r * (d*w - x*r*sgx) (+ dres), sgx = r * mean(d * w * x)
template <int LEN, int V>
__device__ __forceinline__ void rms_backward_row(act_t* dx, const act_t* dres, const act_t* d, const act_t* x,
                                                 const float* w, float r) {
    float sgx = 0.0f;
    for (int c = (threadIdx.x & 31) * V; c < LEN; c += 32 * V) {
        if (V == 4) {
            hyp_f128 dd = hyp_load4(d + c), xx = hyp_load4(x + c), ww = hyp_load128(w + c);
            sgx += (dd[0] * ww[0] * xx[0] + dd[1] * ww[1] * xx[1]) + (dd[2] * ww[2] * xx[2] + dd[3] * ww[3] * xx[3]);
        } else {
            sgx += hyp_ld(d + c) * w[c] * hyp_ld(x + c);
        }
    }
    sgx = hyp_warp_sum(sgx) * r / LEN;
    for (int c = (threadIdx.x & 31) * V; c < LEN; c += 32 * V) {
        if (V == 4) {
            hyp_f128 dd = hyp_load4(d + c), xx = hyp_load4(x + c), ww = hyp_load128(w + c), o = hyp_load4(dx + c);
            hyp_f128 e = dres ? hyp_load4(dres + c) : f128(0.0f, 0.0f, 0.0f, 0.0f);
            o[0] += r * (dd[0] * ww[0] - xx[0] * r * sgx) + e[0];
            o[1] += r * (dd[1] * ww[1] - xx[1] * r * sgx) + e[1];
            o[2] += r * (dd[2] * ww[2] - xx[2] * r * sgx) + e[2];
            o[3] += r * (dd[3] * ww[3] - xx[3] * r * sgx) + e[3];
            hyp_store4(dx + c, o);
        } else {
            hyp_st(dx + c, hyp_ld(dx + c) + (r * (hyp_ld(d + c) * w[c] - hyp_ld(x + c) * r * sgx) + (dres ? hyp_ld(dres + c) : 0.0f)));
        }
    }
}

% if emit.rmsnorm_fwd then
{{ signature("rmsnorm_fwd") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    float r = rms_normalize<C, VEC>(out + (long)n * C, inp + (long)n * C, w, EPS);
    if ((threadIdx.x & 31) == 0) rstd[n] = r;
}
% end

% if emit.residual_rmsnorm_fwd then
// The residual add and the norm in one pass: resid is written, then re-read by the same lanes.
{{ signature("residual_rmsnorm_fwd") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    for (int c = (threadIdx.x & 31) * VEC; c < C; c += 32 * VEC) {
% if VEC == 4 then
        hyp_f128 x = hyp_load4(a + off + c), y = hyp_load4(r + off + c);
        hyp_store4(resid + off + c, f128(x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]));
% else
        hyp_st(resid + off + c, hyp_ld(a + off + c) + hyp_ld(r + off + c));
% end
    }
    float rs = rms_normalize<C, VEC>(out + off, resid + off, w, EPS);
    if ((threadIdx.x & 31) == 0) rstd[n] = rs;
}
% end

% if emit.rmsnorm_bwd_dx then
{{ signature("rmsnorm_bwd_dx") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    rms_backward_row<C, VEC>(dinp + off, nullptr, dout + off, inp + off, w, rstd[n]);
}
% end

% if emit.residual_rmsnorm_bwd_dx then
{{ signature("residual_rmsnorm_bwd_dx") }} {
    int n = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    long off = (long)n * C;
    rms_backward_row<C, VEC>(dinp + off, dres + off, dout + off, inp + off, w, rstd[n]);
}
% end

% if emit.rmsnorm_bwd_dw then
// Block (strip, s): columns [32*strip, +32) of the rows in segment s; thread (lane, ty) sums rows
// ty, ty + ROWS, ...; the ROWS partial sums are then added in ty order.
{{ signature("rmsnorm_bwd_dw") }} {
    __shared__ float sw[ROWS][33];
    const int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int c = blockIdx.x * 32 + lane;
    const int per = (N + SEGS - 1) / SEGS, n0 = blockIdx.y * per, n1 = min(N, n0 + per);
    float aw = 0.0f;
    if (c < C)
        for (int n = n0 + ty; n < n1; n += ROWS) aw += hyp_ld(dout + (long)n * C + c) * hyp_ld(inp + (long)n * C + c) * rstd[n];
    sw[ty][lane] = aw;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < ROWS; k++) aw += sw[k][lane];
        partial[(long)blockIdx.y * C + c] = aw;
    }
}
% end

% if emit.rmsnorm_bwd_dw_finish then
{{ signature("rmsnorm_bwd_dw_finish") }} {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float aw = 0.0f;
    for (int s = 0; s < SEGS; s++) aw += partial[(long)s * C + c];
    dw[c] += aw;
}
% end

% if emit.qknorm_fwd then
// One warp per (row n, head j): q and k heads are normalized, v heads copied.
{{ signature("qknorm_fwd") }} {
    long hr = (long)blockIdx.x * ROWS + (threadIdx.x >> 5); // head-row index n * (NH + 2 NKV) + j
    if (hr >= (long)N * (NH + 2 * NKV)) return;
    long n = hr / (NH + 2 * NKV);
    int j = (int)(hr - n * (NH + 2 * NKV));
    const act_t* x = inp + n * R + j * HD;
    act_t* o = out + n * R + j * HD;
    if (j < NQK) {
        float r = rms_normalize<HD, HVEC>(o, x, j < NH ? qw : kw, QK_EPS);
        if ((threadIdx.x & 31) == 0) rstd[n * NQK + j] = r;
    } else {
        for (int i = (threadIdx.x & 31); i < HD; i += 32) o[i] = x[i]; // a copy: no rounding
    }
}
% end

% if emit.qknorm_bwd_dx then
{{ signature("qknorm_bwd_dx") }} {
    long hr = (long)blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (hr >= (long)N * (NH + 2 * NKV)) return;
    long n = hr / (NH + 2 * NKV);
    int j = (int)(hr - n * (NH + 2 * NKV));
    long off = n * R + j * HD;
    if (j < NQK) {
        rms_backward_row<HD, HVEC>(dinp + off, nullptr, dout + off, inp + off, j < NH ? qw : kw, rstd[n * NQK + j]);
    } else {
        for (int i = (threadIdx.x & 31); i < HD; i += 32) hyp_st(dinp + off + i, hyp_ld(dinp + off + i) + hyp_ld(dout + off + i));
    }
}
% end

% if emit.qknorm_bwd_dw then
// Like rmsnorm_bwd_dw over HD columns, where the rows are (n, head) pairs: q heads feed
// partial[s][0], k heads partial[s][1]. Rows and heads are visited in a fixed order.
{{ signature("qknorm_bwd_dw") }} {
    __shared__ float sq[ROWS][33], sk[ROWS][33];
    const int lane = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int i = blockIdx.x * 32 + lane;
    const int per = (N + SEGS - 1) / SEGS, n0 = blockIdx.y * per, n1 = min(N, n0 + per);
    float aq = 0.0f, ak = 0.0f;
    if (i < HD) {
        for (int n = n0 + ty; n < n1; n += ROWS) {
            for (int j = 0; j < NQK; j++) {
                long off = (long)n * R + j * HD + i;
                float v = hyp_ld(dout + off) * hyp_ld(inp + off) * rstd[(long)n * NQK + j];
                if (j < NH) aq += v; else ak += v;
            }
        }
    }
    sq[ty][lane] = aq;
    sk[ty][lane] = ak;
    __syncthreads();
    if (ty == 0 && i < HD) {
        for (int k = 1; k < ROWS; k++) { aq += sq[k][lane]; ak += sk[k][lane]; }
        partial[(2L * blockIdx.y) * HD + i] = aq;
        partial[(2L * blockIdx.y + 1) * HD + i] = ak;
    }
}
% end

% if emit.qknorm_bwd_dw_finish then
{{ signature("qknorm_bwd_dw_finish") }} {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= HD) return;
    float aq = 0.0f, ak = 0.0f;
    for (int s = 0; s < SEGS; s++) {
        aq += partial[(2L * s) * HD + i];
        ak += partial[(2L * s + 1) * HD + i];
    }
    if (dqw) dqw[i] += aq;
    if (dkw) dkw[i] += ak;
}
% end
