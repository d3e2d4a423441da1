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
}
derive = function(K, decide)
  if K.TOPK < 1 or K.TOPK > K.NE then error({ input = true, render = string.format("moe: TOPK %d must be in [1, NE = %d]", K.TOPK, K.NE) }) end
  decide("dispatch", "one thread per expert, tokens in order",
    "deterministic: each expert's rows are written in token order at its exclusive-scan offset (no atomics), so every run routes identically")
  decide("combine", "per token, its top-k outputs in ascending expert order",
    "the order runtime/cpu/ops_moe.c adds them in (expert by expert); no atomics")
end
kernels = {
  { name = "moe_route", doc = "per token: probs = softmax(logits) in place, top-k (ties to the lower expert), gate weights (renormalised when NORM)",
    params = { "float* __restrict__ probs", "int* __restrict__ topi", "float* __restrict__ topw", "int N" },
    block = "BLOCK", grid = "cdiv(N, BLOCK)" },
  { name = "moe_stats", doc = "loads[e] = routed rows of e, offs = exclusive scan of loads (offs[NE] = N*TOPK), aux = coef*NE*sum_e (loads_e/N)(mean_n p[n,e])",
    params = { "int* __restrict__ loads", "int* __restrict__ offs", "float* __restrict__ aux", "const float* __restrict__ probs",
               "const int* __restrict__ topi", "int N", "float coef" },
    block = "BLOCK", grid = "1", smem = "8*NE" },
  { name = "moe_scatter", doc = "per expert e: its routed rows in token order at offs[e]: rows[r] = token, src[r] = n*TOPK+k, dest[n*TOPK+k] = r",
    params = { "int* __restrict__ rows", "int* __restrict__ src", "int* __restrict__ dest", "const int* __restrict__ topi",
               "const int* __restrict__ offs", "int N" },
    block = "BLOCK", grid = "cdiv(NE, BLOCK)" },
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
  { name = "moe_router_bwd", doc = "per token: dlog[n, :] = the softmax backward of (aux gradient + the gate weights' gradient through the renormalisation)",
    params = { "float* __restrict__ dlog", "const float* __restrict__ probs", "const int* __restrict__ topi",
               "const float* __restrict__ topw", "const float* __restrict__ dg", "const int* __restrict__ loads", "int N",
               "float daux", "float coef" },
    block = "BLOCK", grid = "cdiv(N, BLOCK)" },
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

% if emit.moe_stats then
// One block: thread e (strided) counts expert e's routed rows and sums its probabilities over
// the tokens in order (double); thread 0 then forms the exclusive scan and the aux loss in
// expert order. Integer counts and fixed-order sums: the same on every run and device.
{{ signature("moe_stats") }} {
    extern __shared__ double moe_sh[]; // [NE]: (count_e / N) * (P_e / N)
    for (int e = threadIdx.x; e < NE; e += blockDim.x) {
        int cnt = 0;
        for (long i = 0; i < (long)N * TOPK; i++) cnt += topi[i] == e;
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
// Thread e walks the routing in token order and writes its rows from offs[e] on: a stable,
// atomic-free counting sort of the N*TOPK routed rows by expert.
{{ signature("moe_scatter") }} {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= NE) return;
    int r = offs[e];
    for (int n = 0; n < N; n++)
        for (int k = 0; k < TOPK; k++)
            if (topi[(long)n * TOPK + k] == e) {
                rows[r] = n;
                src[r] = n * TOPK + k;
                dest[n * TOPK + k] = r;
                r++;
            }
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
