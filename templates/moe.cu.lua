--[[ hyperion template
family = "moe"
doc = "mixture-of-experts MLP (runtime/cpu/ops_moe.h's op): softmax top-k router, load-balancing loss, deterministic dispatch, SwiGLU, combine, and their backward; the GEMMs are the device layer's"
constants = {
  C = { "int", doc = "model width (the rows of x, out)" },
  H = { "int", doc = "expert hidden width (the SwiGLU's half row; w1 is [2H, C], w2 [C, H])" },
  NE = { "int", doc = "routed experts" },
  TOPK = { "int", doc = "experts per token" },
  NORM = { "int", default = 1, doc = "1: renormalise the top-k weights to sum 1 (Mixtral); 0: the raw probabilities (OLMoE)" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
  GT = { "int", default = 64, doc = "grouped GEMM: output tile edge (rows and columns); 256 threads compute GT/16 x GT/16 outputs each" },
  GK = { "int", default = 16, doc = "grouped GEMM: the reduction's tile depth" },
}
derive = function(K, decide)
  if K.TOPK < 1 or K.TOPK > K.NE then error({ input = true, render = string.format("moe: TOPK %d must be in [1, NE = %d]", K.TOPK, K.NE) }) end
  decide("dispatch", "a parallel stable counting sort: per-block per-expert counts, a scan over the blocks, each block's rows at its offset",
    "deterministic: each expert's rows are written in token order at its exclusive-scan offset (no atomics), so every run routes identically")
  decide("combine", "per token, its top-k outputs in ascending expert order",
    "the order runtime/cpu/ops_moe.c adds them in (expert by expert); no atomics")
end
kernels = {
  { name = "moe_route", doc = "per token: probs = softmax(logits) in place, top-k (ties to the lower expert), gate weights (renormalised when NORM)",
    params = { "float* __restrict__ probs", "int* __restrict__ topi", "float* __restrict__ topw", "int N" },
    block = "BLOCK", grid = "cdiv(N, BLOCK)" },
  { name = "moe_count", doc = "per block b of BLOCK routed slots (slot i = n*TOPK+k, token order): blk[b*NE + e] = the slots of b routed to e",
    params = { "int* __restrict__ blk", "const int* __restrict__ topi", "int N" },
    block = "BLOCK", grid = "cdiv(N*TOPK, BLOCK)" },
  { name = "moe_stats", doc = "loads[e] = sum over blocks of blk[., e], blk turned into its exclusive scan over the blocks per expert, offs = exclusive scan of loads (offs[NE] = N*TOPK), aux = coef*NE*sum_e (loads_e/N)(mean_n p[n,e])",
    params = { "int* __restrict__ loads", "int* __restrict__ offs", "float* __restrict__ aux", "int* __restrict__ blk",
               "const float* __restrict__ probs", "int N", "int nblk", "float coef" },
    block = "BLOCK", grid = "1", smem = "8*NE" },
  { name = "moe_scatter", doc = "per routed slot i of block b: r = offs[e] + blk[b*NE + e] + the slots of b before i routed to e: rows[r] = token, src[r] = i, dest[i] = r",
    params = { "int* __restrict__ rows", "int* __restrict__ src", "int* __restrict__ dest", "const int* __restrict__ topi",
               "const int* __restrict__ offs", "const int* __restrict__ blk", "int N" },
    block = "BLOCK", grid = "cdiv(N*TOPK, BLOCK)" },
  { name = "moe_gather", doc = "xe[r, c] = x[rows[r], c] for the R = N*TOPK routed rows",
    params = { "float* __restrict__ xe", "const float* __restrict__ x", "const int* __restrict__ rows", "int R" },
    block = "BLOCK", grid = "cdiv(R*C, BLOCK)" },
  { name = "moe_swiglu_fwd", doc = "a[r, i] = silu(h[r, i]) * h[r, H + i] (h = [gate | up], as swiglu.cu)",
    params = { "float* __restrict__ a", "const float* __restrict__ h", "int R" },
    block = "BLOCK", grid = "cdiv(R*H, BLOCK)" },
  { name = "moe_swiglu_bwd", doc = "dh[r, i] += da * up * s * (1 + g (1 - s)); dh[r, H + i] += da * silu(g)",
    params = { "float* __restrict__ dh", "const float* __restrict__ da", "const float* __restrict__ h", "int R" },
    block = "BLOCK", grid = "cdiv(R*H, BLOCK)" },
  { name = "moe_combine", doc = "out[n, c] = sum over the token's top-k, in ascending expert order, of g * ye[dest, c] (overwrites)",
    params = { "float* __restrict__ out", "const float* __restrict__ ye", "const int* __restrict__ topi",
               "const float* __restrict__ topw", "const int* __restrict__ dest", "int N" },
    block = "BLOCK", grid = "cdiv(N*C, BLOCK)" },
  { name = "moe_dy", doc = "per routed row r: dg[src[r]] = <dout[rows[r]], ye[r]> (double, c ascending), dye[r] = g * dout[rows[r]]",
    params = { "float* __restrict__ dye", "float* __restrict__ dg", "const float* __restrict__ dout", "const float* __restrict__ ye",
               "const int* __restrict__ rows", "const int* __restrict__ src", "const float* __restrict__ topw", "int R" },
    block = "BLOCK", grid = "cdiv(R, BLOCK)" },
  { name = "moe_scatter_add", doc = "dinp[n, c] += dxe[dest, c] over the token's top-k, in ascending expert order",
    params = { "float* __restrict__ dinp", "const float* __restrict__ dxe", "const int* __restrict__ topi",
               "const int* __restrict__ dest", "int N" },
    block = "BLOCK", grid = "cdiv(N*C, BLOCK)" },
  { name = "moe_gemm_rows", doc = "grouped GEMM over every expert's row segment (offs from device memory, no host sizes): out[r, n] = sum_k act[r, k] W_e(k, n) for r in expert e's rows, W_e = w + e*Nout*Kd stored [Nout, Kd] (wt 1: act W_e^T) or [Kd, Nout] (wt 0); written. fp32, k ascending",
    params = { "float* __restrict__ out", "const float* __restrict__ act", "const float* __restrict__ w", "const int* __restrict__ offs",
               "int Nout", "int Kd", "int wt" },
    block = 256, grid = "cdiv(N*TOPK, GT) + NE, cdiv(Nout, GT)" },
  { name = "moe_gemm_wgrad", doc = "grouped weight gradient: dw_e[m, n] += sum over expert e's rows r (ascending) of a[r, m] b[r, n]; dw_e = dw + e*M*Nn. fp32",
    params = { "float* __restrict__ dw", "const float* __restrict__ a", "const float* __restrict__ b", "const int* __restrict__ offs",
               "int M", "int Nn" },
    block = 256, grid = "cdiv(Nn, GT), cdiv(M, GT), NE" },
  { name = "moe_router_bwd", doc = "per token: dlog[n, :] = the softmax backward of (aux gradient + the gate weights' gradient through the renormalisation)",
    params = { "float* __restrict__ dlog", "const float* __restrict__ probs", "const int* __restrict__ topi",
               "const float* __restrict__ topw", "const float* __restrict__ dg", "const int* __restrict__ loads", "int N",
               "float daux", "float coef" },
    block = "BLOCK", grid = "cdiv(N, BLOCK)" },
}
-- Cost per launch (generator/lua/perf.lua, perf_moe.lua), every global load and store as the
-- kernel issues it (tests/gen/test_perf_moe_counts.sh holds them to the simulator's counts):
-- `rd`/`wr` DRAM bytes, `reread` the loads L1/L2 serve again (a token's row read once per routed
-- copy, the routing lists read per element). moe_route's running maximum reloads p[e] at each new
-- maximum: H_E - 1 times per token for exchangeable logits (harmonic number, an expectation).
local function harm(n) local h = 0 for i = 1, n do h = h + 1 / i end return h end
cost = {
  moe_route = function(a) local E, K, N = a.NE, a.TOPK, a.N
    local ld = 4 * E + (harm(E) - 1) + E * K * (K - 1) / 2 + 2 * (K * E - K * (K - 1) / 2) - 2 * K + 2 * K + a.NORM * K
    local st = 2 * E + 2 * K + a.NORM * K
    return { fp32 = N * (4 * E + 2 * K), sfu = N * E, rd = 4 * N * E, wr = 4 * N * st, reread = 4 * N * (ld - E) } end,
  moe_count = function(a) local nb = (a.N * a.TOPK + a.BLOCK - 1) // a.BLOCK
    return { rd = 4 * a.N * a.TOPK, wr = 4 * nb * a.NE } end,
  moe_stats = function(a) local E, N = a.NE, a.N
    local nb = (N * a.TOPK + a.BLOCK - 1) // a.BLOCK
    return { fp32 = 2 * E * N, rd = 4 * (N * E + nb * E), wr = 4 * (nb * E + 2 * E + 2), reread = 4 * E } end,
  moe_scatter = function(a) local R = a.N * a.TOPK
    return { rd = 4 * R + 4 * a.NE, wr = 12 * R, reread = 4 * R - 4 * a.NE + 4 * R } end,
  moe_gather = function(a) local n = a.R * a.C
    return { rd = 4 * n + 4 * a.R, wr = 4 * n, reread = 4 * (n - a.R) } end,
  moe_swiglu_fwd = function(a) local n = a.R * a.H
    return { fp32 = 6 * n, sfu = 2 * n, rd = 8 * n, wr = 4 * n } end,
  moe_swiglu_bwd = function(a) local n = a.R * a.H
    return { fp32 = 14 * n, sfu = 2 * n, rd = 20 * n, wr = 8 * n } end,
  moe_combine = function(a) local K, n = a.TOPK, a.N * a.C
    local rd = 4 * K * n + 12 * a.N * K
    return { fp32 = 2 * K * n, rd = rd, wr = 4 * n, reread = 4 * (2 * K * K + 3 * K) * n - rd } end,
  moe_dy = function(a) local R, C = a.R, a.C
    local rd = 8 * R * C + 16 * R
    return { fp32 = 4 * R * C, rd = rd, wr = 4 * R * (C + 1), reread = 4 * R * (3 * C + 4) - rd } end,
  moe_scatter_add = function(a) local K, n = a.TOPK, a.N * a.C
    local rd = 4 * n + 4 * K * n + 8 * a.N * K
    return { fp32 = K * n, rd = rd, wr = 4 * n, reread = 4 * (2 * K * K + 2 * K + 1) * n - rd } end,
  -- the grouped GEMMs at balance (perf_moe.lua's assumption: N*TOPK/NE rows per expert, each in
  -- cdiv(rows, GT) row tiles): per row tile x column tile, every k tile loads its valid act rows
  -- and its valid weight columns once; shared memory serves the rest
  moe_gemm_rows = function(a) local R, E = a.N * a.TOPK, a.NE
    local tpe = math.ceil(R / E / a.GT)
    local tiles, ct = E * tpe, math.ceil(a.Nout / a.GT)
    local grid = (math.ceil(R / a.GT) + E) * ct
    local offs = tpe * ct * E * (E + 1) + (grid - tiles * ct) * 2 * E -- thread 0's search
    local ld = ct * R * a.Kd + tiles * a.Nout * a.Kd + offs
    local rd = R * a.Kd + E * a.Nout * a.Kd + E + 1
    return { fp32 = 2 * R * a.Nout * a.Kd, rd = 4 * rd, reread = 4 * (ld - rd), wr = 4 * R * a.Nout } end,
  moe_gemm_wgrad = function(a) local R, E = a.N * a.TOPK, a.NE
    local rt, ct = math.ceil(a.M / a.GT), math.ceil(a.Nn / a.GT)
    local ld = ct * R * a.M + rt * R * a.Nn + E * a.M * a.Nn + 2 * E * rt * ct
    local rd = R * (a.M + a.Nn) + E * a.M * a.Nn + E + 1
    return { fp32 = 2 * R * a.M * a.Nn, rd = 4 * rd, reread = 4 * (ld - rd), wr = 4 * E * a.M * a.Nn } end,
  moe_router_bwd = function(a) local E, K, N = a.NE, a.TOPK, a.N
    local rd = 4 * N * (E + 3 * K) + 4 * E
    return { fp32 = N * (8 * E + 6 * K), rd = rd, wr = 4 * N * (2 * E + K),
      reread = 4 * N * (5 * E + 4 * K + a.NORM * 4 * K) - rd } end,
}
-- no `ops`: runtime/device/exec_dev_moe.c runs the plan's moe_fwd / moe_bwd (these kernels between
-- the device layer's expert GEMMs, whose sizes are the per-expert loads read back to the host)
ops = {}
]]
{{ partial("common") }}

// silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) (swiglu.cu's form)
__device__ __forceinline__ float moe_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

% if emit.moe_route then
// One thread per token, the CPU op's arithmetic in its order: max-subtracted softmax with a
// double sum, top-k by selection (strictly greater wins: ties go to the lower index), the k
// weights renormalised by their double sum.
{{ signature("moe_route") }} {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float* p = probs + (long)n * NE;
    float mx = p[0];
    for (int e = 1; e < NE; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < NE; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < NE; e++) p[e] = (float)(p[e] / sum);
    int* ti = topi + (long)n * TOPK;
    float* tw = topw + (long)n * TOPK;
    double tsum = 0.0;
    for (int k = 0; k < TOPK; k++) {
        int best = -1;
        for (int e = 0; e < NE; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= ti[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ti[k] = best;
        tw[k] = p[best];
        tsum += p[best];
    }
    if (NORM)
        for (int k = 0; k < TOPK; k++) tw[k] = (float)(tw[k] / tsum);
}
% end

% if emit.moe_count then
// The counting sort's first pass: the block's BLOCK slots into shared memory, then thread e
// (strided) counts expert e's among them. Integer counts: no order to depend on.
{{ signature("moe_count") }} {
    __shared__ int ex[BLOCK];
    const long R = (long)N * TOPK, i = (long)blockIdx.x * BLOCK + threadIdx.x;
    ex[threadIdx.x] = i < R ? topi[i] : -1;
    __syncthreads();
    for (int e = threadIdx.x; e < NE; e += blockDim.x) {
        int c = 0;
        for (int j = 0; j < BLOCK; j++) c += ex[j] == e;
        blk[(long)blockIdx.x * NE + e] = c;
    }
}
% end

% if emit.moe_stats then
// One block: thread e (strided) turns expert e's per-block counts into their exclusive scan over
// the blocks (the block's first row within the expert's segment), totals them, and sums its
// probabilities over the tokens in order (double); thread 0 then forms the exclusive scan over the
// experts and the aux loss in expert order. Integer counts and fixed-order sums: the same on every
// run and device.
{{ signature("moe_stats") }} {
    extern __shared__ double moe_sh[]; // [NE]: (count_e / N) * (P_e / N)
    for (int e = threadIdx.x; e < NE; e += blockDim.x) {
        int cnt = 0;
        for (int b = 0; b < nblk; b++) {
            const int c = blk[(long)b * NE + e];
            blk[(long)b * NE + e] = cnt;
            cnt += c;
        }
        double P = 0.0;
        for (int n = 0; n < N; n++) P += probs[(long)n * NE + e];
        loads[e] = cnt;
        moe_sh[e] = ((double)cnt / N) * (P / N);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double auxsum = 0.0;
    int off = 0;
    for (int e = 0; e < NE; e++) {
        auxsum += moe_sh[e];
        offs[e] = off;
        off += loads[e];
    }
    offs[NE] = off;
    *aux = (float)(coef * NE * auxsum);
}
% end

% if emit.moe_scatter then
// The counting sort's last pass, one thread per routed slot: its row is the expert's offset, plus
// the rows of the expert in the blocks before (moe_stats' scan), plus the block's earlier slots
// routed to the same expert. Stable (token order within every expert) and atomic-free: the rows
// of the serial walk "for each expert, every slot in token order", bit for bit.
{{ signature("moe_scatter") }} {
    __shared__ int ex[BLOCK];
    const long R = (long)N * TOPK, i = (long)blockIdx.x * BLOCK + threadIdx.x;
    ex[threadIdx.x] = i < R ? topi[i] : -1;
    __syncthreads();
    if (i >= R) return;
    const int e = ex[threadIdx.x];
    int rank = 0;
    for (int j = 0; j < (int)threadIdx.x; j++) rank += ex[j] == e;
    const int r = offs[e] + blk[(long)blockIdx.x * NE + e] + rank;
    rows[r] = (int)(i / TOPK);
    src[r] = (int)i;
    dest[i] = r;
}
% end

% if emit.moe_gather then
{{ signature("moe_gather") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)R * C) return;
    const long r = i / C;
    xe[i] = x[(long)rows[r] * C + (i - r * C)];
}
% end

% if emit.moe_swiglu_fwd then
{{ signature("moe_swiglu_fwd") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)R * H) return;
    const long r = i / H;
    const float g = h[r * 2 * H + (i - r * H)], u = h[r * 2 * H + H + (i - r * H)];
    a[i] = g * moe_sigmoid(g) * u;
}
% end

% if emit.moe_swiglu_bwd then
{{ signature("moe_swiglu_bwd") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)R * H) return;
    const long r = i / H, j = r * 2 * H + (i - r * H);
    const float g = h[j], u = h[j + H], d = da[i], s = moe_sigmoid(g);
    dh[j] += d * u * s * (1.0f + g * (1.0f - s));
    dh[j + H] += d * g * s;
}
% end

// The k-th of a token's routed slots in ascending expert order (the experts of a token are
// distinct): the slot with the smallest expert above `last`.
__device__ __forceinline__ int moe_next_slot(const int* ti, int last) {
    int best = -1;
    for (int k = 0; k < TOPK; k++)
        if (ti[k] > last && (best < 0 || ti[k] < ti[best])) best = k;
    return best;
}

% if emit.moe_combine then
{{ signature("moe_combine") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * C) return;
    const long n = i / C, c = i - n * C;
    const int* ti = topi + n * TOPK;
    float acc = 0.0f;
    int last = -1;
    for (int j = 0; j < TOPK; j++) {
        const int k = moe_next_slot(ti, last);
        acc += topw[n * TOPK + k] * ye[(long)dest[n * TOPK + k] * C + c];
        last = ti[k];
    }
    out[i] = acc;
}
% end

% if emit.moe_dy then
{{ signature("moe_dy") }} {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    const float* d = dout + (long)rows[r] * C;
    const float* y = ye + (long)r * C;
    float* dy = dye + (long)r * C;
    const float gw = topw[src[r]];
    double dot = 0.0;
    for (int c = 0; c < C; c++) {
        dot += (double)d[c] * y[c];
        dy[c] = gw * d[c];
    }
    dg[src[r]] = (float)dot;
}
% end

% if emit.moe_scatter_add then
{{ signature("moe_scatter_add") }} {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * C) return;
    const long n = i / C, c = i - n * C;
    const int* ti = topi + n * TOPK;
    float v = dinp[i];
    int last = -1;
    for (int j = 0; j < TOPK; j++) {
        const int k = moe_next_slot(ti, last);
        v += dxe[(long)dest[n * TOPK + k] * C + c];
        last = ti[k];
    }
    dinp[i] = v;
}
% end

// The grouped GEMMs: 256 threads, an output tile of GT x GT (thread (ty, tx) = (tid / 16, tid % 16)
// computes rows ty + 16 i and columns tx + 16 j), the reduction in tiles of GK through shared
// memory, each output summed by one thread with fmaf in ascending k: deterministic, no atomics.
#define MOE_TPR (GT / 16)

% if emit.moe_gemm_rows then
// Block (t, nt): the t-th row tile over the experts in order (expert e has cdiv(load_e, GT) tiles,
// read from offs on the device); blocks past the last tile exit (the grid is sized for the worst
// case, cdiv(R, GT) + NE row tiles).
{{ signature("moe_gemm_rows") }} {
    __shared__ float As[GK][GT + 1], Bs[GK][GT + 1];
    __shared__ int seg[3];
    if (threadIdx.x == 0) {
        int t = blockIdx.x, e = 0;
        seg[0] = NE;
        for (; e < NE; e++) {
            const int o = offs[e], L = offs[e + 1] - o, nt = (L + GT - 1) / GT;
            if (t < nt) {
                seg[0] = e, seg[1] = o + t * GT, seg[2] = L - t * GT < GT ? L - t * GT : GT;
                break;
            }
            t -= nt;
        }
    }
    __syncthreads();
    const int e = seg[0], row0 = seg[1], rows = seg[2];
    if (e == NE) return;
    const int n0 = blockIdx.y * GT, tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const float* we = w + (long)e * Nout * Kd;
    float acc[MOE_TPR][MOE_TPR];
    for (int i = 0; i < MOE_TPR; i++)
        for (int j = 0; j < MOE_TPR; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < Kd; k0 += GK) {
        for (int idx = tid; idx < GK * GT; idx += 256) {
            const int m = idx / GK, kk = idx % GK;
            As[kk][m] = (m < rows && k0 + kk < Kd) ? act[(long)(row0 + m) * Kd + k0 + kk] : 0.0f;
            int n, kb;
            if (wt) n = idx / GK, kb = idx % GK;
            else n = idx % GT, kb = idx / GT;
            Bs[kb][n] = (n0 + n < Nout && k0 + kb < Kd) ? (wt ? we[(long)(n0 + n) * Kd + k0 + kb] : we[(long)(k0 + kb) * Nout + n0 + n]) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GK; kk++)
            for (int i = 0; i < MOE_TPR; i++)
                for (int j = 0; j < MOE_TPR; j++) acc[i][j] = fmaf(As[kk][ty + 16 * i], Bs[kk][tx + 16 * j], acc[i][j]);
        __syncthreads();
    }
    for (int i = 0; i < MOE_TPR; i++)
        for (int j = 0; j < MOE_TPR; j++) {
            const int m = ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < rows && n < Nout) out[(long)(row0 + m) * Nout + n] = acc[i][j];
        }
}
% end

% if emit.moe_gemm_wgrad then
// Block (nt, mt, e): the (mt, nt) tile of expert e's gradient, reduced over its rows in order.
{{ signature("moe_gemm_wgrad") }} {
    __shared__ float As[GK][GT + 1], Bs[GK][GT + 1];
    __shared__ int seg[2];
    const int e = blockIdx.z;
    if (threadIdx.x == 0) {
        const int o0 = offs[e];
        seg[0] = o0, seg[1] = offs[e + 1] - o0;
    }
    __syncthreads();
    const int o = seg[0], L = seg[1];
    if (L == 0) return;
    const int m0 = blockIdx.y * GT, n0 = blockIdx.x * GT, tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    float acc[MOE_TPR][MOE_TPR];
    for (int i = 0; i < MOE_TPR; i++)
        for (int j = 0; j < MOE_TPR; j++) acc[i][j] = 0.0f;
    for (int r0 = 0; r0 < L; r0 += GK) {
        for (int idx = tid; idx < GK * GT; idx += 256) {
            const int kk = idx / GT, c = idx % GT;
            const bool rv = r0 + kk < L;
            As[kk][c] = (rv && m0 + c < M) ? a[(long)(o + r0 + kk) * M + m0 + c] : 0.0f;
            Bs[kk][c] = (rv && n0 + c < Nn) ? b[(long)(o + r0 + kk) * Nn + n0 + c] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GK; kk++)
            for (int i = 0; i < MOE_TPR; i++)
                for (int j = 0; j < MOE_TPR; j++) acc[i][j] = fmaf(As[kk][ty + 16 * i], Bs[kk][tx + 16 * j], acc[i][j]);
        __syncthreads();
    }
    float* dwe = dw + (long)e * M * Nn;
    for (int i = 0; i < MOE_TPR; i++)
        for (int j = 0; j < MOE_TPR; j++) {
            const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < Nn) dwe[(long)m * Nn + n] += acc[i][j];
        }
}
% end

% if emit.moe_router_bwd then
// The CPU op's router backward for one token: dp = the aux gradient coef*NE*f_e/N (times daux),
// plus the gate weights' gradient (through the renormalisation when NORM), then the softmax's
// backward dlogit = p * (dp - <dp, p>) (double dot products).
{{ signature("moe_router_bwd") }} {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* p = probs + (long)n * NE;
    const int* ti = topi + (long)n * TOPK;
    const float* tw = topw + (long)n * TOPK;
    const float* g = dg + (long)n * TOPK;
    float* dlr = dlog + (long)n * NE;
    for (int e = 0; e < NE; e++) dlr[e] = (float)(daux * coef * NE * ((double)loads[e] / N) / N);
    if (NORM) {
        double S = 0.0, dot = 0.0;
        for (int k = 0; k < TOPK; k++) {
            S += p[ti[k]];
            dot += (double)g[k] * tw[k];
        }
        for (int k = 0; k < TOPK; k++) dlr[ti[k]] += (float)((g[k] - dot) / S);
    } else {
        for (int k = 0; k < TOPK; k++) dlr[ti[k]] += g[k];
    }
    double sdp = 0.0;
    for (int e = 0; e < NE; e++) sdp += (double)dlr[e] * p[e];
    for (int e = 0; e < NE; e++) dlr[e] = (float)(p[e] * (dlr[e] - sdp));
}
% end
