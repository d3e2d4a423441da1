--[[ hyperion template
family = "embedding"
doc = "token (+ learned position) embedding: forward gather, deterministic backward (no float atomics)"
constants = {
  C = { "int", doc = "model width" },
  V = { "int", doc = "vocabulary size (valid token ids are 0..V-1; wte may have padded rows)" },
  WPE = { "bool", default = true, doc = "learned position embedding (GPT-2); false for RoPE models" },
  ACT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "activation storage (v2102): out/dout f32, or bf16 (the sum in fp32, rounded on store); the tables and their gradients stay fp32" },
  BLOCK = { "int", default = 256, doc = "threads per block" },
  VROWS = { "int", default = 64, doc = "vocabulary rows owned by one block of the dwte backward" },
}
derive = function(K, decide)
  K.VEC = K.C % 4 == 0 and 4 or 1
  K.CV = K.C // K.VEC -- vectors per row
  decide("vector_width", K.VEC, K.VEC == 4 and "C % 4 == 0: 16-byte loads" or "C is not a multiple of 4: scalar loads")
  decide("dwte_rows_per_block", K.VROWS, "each block owns VROWS vocabulary rows and scans all tokens in order: deterministic, no atomics")
end
kernels = {
  { name = "embedding_fwd", doc = "out[n, :] = wte[tokens[n], :] (+ wpe[t, :], t = pos[n] (v2126: the position in its document) or n % T without pos); an id outside 0..V-1 gives a zero row",
    params = { "act_t* __restrict__ out", "const int* __restrict__ tokens", "const float* __restrict__ wte",
               "const float* __restrict__ wpe", "const int* __restrict__ pos", "int N", "int T" },
    block = "BLOCK", grid = "cdiv(N*CV, BLOCK)" },
  { name = "embedding_bwd_wte", doc = "dwte[v, :] += sum over n with tokens[n] == v of dout[n, :], n ascending",
    params = { "float* __restrict__ dwte", "const act_t* __restrict__ dout", "const int* __restrict__ tokens", "int N" },
    block = "BLOCK", grid = "cdiv(V, VROWS), cdiv(CV, BLOCK)" },
  { name = "embedding_bwd_wpe", doc = "dwpe[t, :] += sum_b dout[b, t, :], b ascending; with pos (v2126): the sum over the rows n with pos[n] = t, n ascending",
    params = { "float* __restrict__ dwpe", "const act_t* __restrict__ dout", "const int* __restrict__ pos", "int B", "int T" },
    block = "BLOCK", grid = "cdiv(T*CV, BLOCK)" },
}
ops = {
  embedding_fwd = { { "embedding_fwd", "out1", "in1", "in2", "in3", "in4", "N", "T" } },
  embedding_bwd = { { "embedding_bwd_wte", "out1", "in1", "in2", "N" }, { "embedding_bwd_wpe", "out2", "in1", "in3", "B", "T" } },
}
-- cost of one launch (generator/lua/perf.lua; fields as in templates/gelu.cu.lua): a gather of N
-- rows of wte (and wpe), 4-byte ids; the dwte backward scans the ids once per block (VROWS rows)
cost = {
  embedding_fwd = function(a) local NC = a.N * a.C
    return { fp32 = NC, rd = 4 * a.N + (a.WPE and 8 or 4) * NC, wr = a.E * NC,
             reread = 4 * a.N * a.CV - 4 * a.N } end, -- every vector thread loads its row's token id
  embedding_bwd_wte = function(a) local NC = a.N * a.C
    return { fp32 = NC, rd = a.E * NC + 4 * NC + 4 * a.N, wr = 4 * NC,
             reread = 4 * a.N * ((a.V + a.VROWS - 1) // a.VROWS) * ((a.CV + a.BLOCK - 1) // a.BLOCK) - 4 * a.N + 4 * a.N * a.CV } end,
  embedding_bwd_wpe = function(a) local NC = a.N * a.C
    return { fp32 = NC, rd = a.E * NC + 4 * a.T * a.C, wr = 4 * a.T * a.C } end,
}
]]
{{ partial("common") }}
typedef {{ ACT == "bf16" and "hyp_bf16" or "float" }} act_t;

% if emit.embedding_fwd then
// One thread per VEC channels of a row.
{{ signature("embedding_fwd") }} {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x; // vector index
    if (e >= (long)N * CV) return;
    int n = (int)(e / CV), c = (int)(e - (long)n * CV) * VEC;
    int tok = tokens[n];
    act_t* o = out + (long)n * C + c;
    bool ok = tok >= 0 && tok < V;
% if VEC == 4 then
    hyp_f128 x = ok ? hyp_load128(wte + (long)tok * C + c) : f128(0.0f, 0.0f, 0.0f, 0.0f);
    if (WPE && ok) {
        hyp_f128 p = hyp_load128(wpe + (long)(pos != nullptr ? pos[n] : n % T) * C + c);
        x[0] += p[0]; x[1] += p[1]; x[2] += p[2]; x[3] += p[3];
    }
    hyp_store4(o, x);
% else
    float x = ok ? wte[(long)tok * C + c] : 0.0f;
    if (WPE && ok) x += wpe[(long)(pos != nullptr ? pos[n] : n % T) * C + c];
    hyp_st(o, x);
% end
}
% end

% if emit.embedding_bwd_wte then
// Block (blockIdx.x, blockIdx.y) owns vocabulary rows [v0, v0 + VROWS) and the channel vectors
// [blockIdx.y * BLOCK, ...): it walks the tokens in chunks of BLOCK, compacts the positions whose
// token falls in its rows (in order: ballots and a prefix over the warps), then every thread adds
// those rows of dout to its own channels. Each dwte element is written by one thread only, in
// ascending n: the same order as the CPU op, so the result is bit-identical and deterministic.
{{ signature("embedding_bwd_wte") }} {
    __shared__ int pos[BLOCK];
    __shared__ int wcount[BLOCK / 32];
    const int v0 = blockIdx.x * VROWS;
    const int cv = blockIdx.y * BLOCK + threadIdx.x; // this thread's channel vector
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int n0 = 0; n0 < N; n0 += BLOCK) {
        int n = n0 + threadIdx.x;
        int tok = n < N ? tokens[n] : -1;
        bool mine = tok >= v0 && tok < v0 + VROWS && tok < V;
        unsigned bal = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) wcount[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < BLOCK / 32; w++) {
            if (w < warp) before += wcount[w];
            total += wcount[w];
        }
        if (mine) pos[before + __popc(bal & ((1u << lane) - 1u))] = n;
        __syncthreads();
        if (cv < CV) {
            for (int j = 0; j < total; j++) {
                int m = pos[j];
                float* dw = dwte + (long)tokens[m] * C + cv * VEC;
                const act_t* d = dout + (long)m * C + cv * VEC;
% if VEC == 4 then
                hyp_f128 a = hyp_load128(dw), b = hyp_load4(d);
                hyp_store128(dw, f128(a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]));
% else
                dw[0] += hyp_ld(d);
% end
            }
        }
        __syncthreads(); // pos and wcount are rewritten by the next chunk
    }
}
% end

% if emit.embedding_bwd_wpe then
// One thread per (t, channel vector): sums the B rows in order. With pos (v2126: positions restart
// at each document) it scans all B*T rows in order and adds those at position t: the cpu op's
// order, deterministic; O(B*T) reads of pos per thread, a cost only packed runs pay.
{{ signature("embedding_bwd_wpe") }} {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)T * CV) return;
    int t = (int)(e / CV), c = (int)(e - (long)t * CV) * VEC;
    float* dp = dwpe + (long)t * C + c;
    if (pos != nullptr) {
        for (long n = 0; n < (long)B * T; n++) {
            if (pos[n] != t) continue;
            for (int k = 0; k < VEC; k++) dp[k] += hyp_ld(dout + n * C + c + k);
        }
        return;
    }
% if VEC == 4 then
    hyp_f128 acc = hyp_load128(dp);
    for (int b = 0; b < B; b++) {
        hyp_f128 d = hyp_load4(dout + ((long)b * T + t) * C + c);
        acc[0] += d[0]; acc[1] += d[1]; acc[2] += d[2]; acc[3] += d[3];
    }
    hyp_store128(dp, acc);
% else
    float acc = dp[0];
    for (int b = 0; b < B; b++) acc += hyp_ld(dout + ((long)b * T + t) * C + c);
    dp[0] = acc;
% end
}
% end
