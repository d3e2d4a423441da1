--[[ hyperion template
family = "gemm"
doc = "the project's own tensor-core GEMM (v2119): D[M,N] = epilogue(A[M,K] B[N,K]^T) with bf16 A and B (the layout of op_matmul_fwd: out = inp w^T), fp32 accumulation on mma.sync m16n8k16, STAGES-deep cp.async pipeline, ldmatrix fragments; epilogue none, bias, bias + GELU (tanh) or SwiGLU (D[M,N/2] = silu(gate) up of the [gate | up] product); optional RMSNorm prologue (rows of A scaled by a gain and a precomputed 1/rms); fp32 or bf16 output"
constants = {
  TILE_M = { "int", default = 128, doc = "block tile rows (v2119 tile_m)" },
  TILE_N = { "int", default = 128, doc = "block tile columns (v2119 tile_n)" },
  TILE_K = { "int", default = 32, doc = "block tile depth per pipeline stage, a multiple of 16 (v2119 tile_k)" },
  STAGES = { "int", default = 3, doc = "cp.async pipeline stages, 2..5 (v2119 stages)" },
  WARPS_M = { "int", default = 2, doc = "warps along M; each warp owns a (TILE_M/WARPS_M) x (TILE_N/WARPS_N) sub-tile" },
  WARPS_N = { "int", default = 2, doc = "warps along N" },
  EPILOGUE = { "enum", values = { "none", "bias", "bias_gelu", "swiglu" }, default = "none",
    doc = "applied to the fp32 accumulator before the store: none; + bias[n]; gelu(. + bias[n]) (tanh form, as templates/gelu.cu.lua); swiglu: N = 2H columns [gate | up] (B's rows 0..H-1 gate, H..2H-1 up, the plan's fused w_gu), D [M, H] = silu(gate) * up as templates/swiglu.cu.lua computes it, no bias" },
  PROLOGUE = { "enum", values = { "none", "rmsnorm" }, default = "none",
    doc = "rmsnorm: D = (diag(rstd) (A diag(gain))) B^T — A's fragments are multiplied by gain[k] (and rounded to bf16) on their way to the mma, the row's rstd[m] (a precomputed 1/rms) scales the accumulator" },
  OUT = { "enum", values = { "f32", "bf16" }, default = "f32", doc = "output storage (D, aux and bias: cuBLASLt's rule, the bias has D's type): fp32, or bf16 rounded to nearest even" },
  AUX = { "bool", default = false, doc = "EPILOGUE bias_gelu: also store the pre-activation (after the bias, before GELU) into aux, the GELU backward's input (cuBLASLt's GELU_AUX_BIAS, v2166); swiglu: store h = [gate | up] [M, 2H] into aux, swiglu_bwd's input" },
}
derive = function(K, decide)
  local function need(ok, msg) if not ok then error(msg) end end
  need(K.TILE_K % 16 == 0 and K.TILE_K >= 16 and K.TILE_K <= 128, "TILE_K " .. K.TILE_K .. " must be a multiple of 16 in 16..128 (the mma k-step is 16)")
  need(not K.AUX or K.EPILOGUE == "bias_gelu" or K.EPILOGUE == "swiglu", "AUX stores the activation's input: it needs EPILOGUE bias_gelu or swiglu")
  need(K.STAGES >= 2 and K.STAGES <= 5, "STAGES " .. K.STAGES .. " must be 2..5")
  need(K.WARPS_M >= 1 and K.WARPS_N >= 1 and K.WARPS_M * K.WARPS_N <= 8, "WARPS_M x WARPS_N must be 1..8 warps")
  need(K.TILE_M % (16 * K.WARPS_M) == 0, "TILE_M " .. K.TILE_M .. " must be a multiple of 16 x WARPS_M (each warp's rows are whole m16 fragments)")
  need(K.TILE_N % (16 * K.WARPS_N) == 0, "TILE_N " .. K.TILE_N .. " must be a multiple of 16 x WARPS_N (B fragments are loaded in pairs of n8 tiles)")
  K.BLOCK = 32 * K.WARPS_M * K.WARPS_N
  K.WTM, K.WTN = K.TILE_M // K.WARPS_M, K.TILE_N // K.WARPS_N
  K.MI, K.NI = K.WTM // 16, K.WTN // 8
  need(K.MI * K.NI * 4 <= 128, string.format("a warp tile of %d x %d holds %d fp32 accumulators per lane; at most 128 fit the registers", K.WTM, K.WTN, K.MI * K.NI * 4))
  K.LDS = K.TILE_K + 8 -- smem row in bf16: +16 bytes staggers the 8 rows of an ldmatrix over the banks
  K.SMEM = K.STAGES * ((K.TILE_M + K.TILE_N) * K.LDS * 2 + (K.PROLOGUE == "rmsnorm" and K.TILE_K * 4 or 0))
  need(K.SMEM <= 227 * 1024, "the pipeline needs " .. K.SMEM .. " B of shared memory (> 227 KB): fewer STAGES or smaller tiles")
  decide("tiles", string.format("%dx%dx%d, %d stages, %dx%d warps", K.TILE_M, K.TILE_N, K.TILE_K, K.STAGES, K.WARPS_M, K.WARPS_N),
    string.format("warp tile %dx%d (%d mma per k-step of 16); dynamic shared memory %d B", K.WTM, K.WTN, K.MI * K.NI, K.SMEM))
end
kernels = {
  { name = "gemm_bf16", doc = "D[M,N] = epilogue(rstd? * (A[M,K] (gain?) B[N,K]^T)) (aux[M,N] = the GELU's input under AUX); aux, bias, rstd, gain may be NULL when the rendered epilogue/prologue does not use them",
    -- swiglu: N is the GEMM's 2H; D is [M, N/2], aux [M, N]; block x holds gate and up columns [x TILE_N/2, (x+1) TILE_N/2) — the same grid, as cdiv(2H, TILE_N) = cdiv(H, TILE_N/2)
    params = { "out_t* __restrict__ D", "out_t* __restrict__ aux", "const hyp_bf16* __restrict__ A", "const hyp_bf16* __restrict__ B",
               "const out_t* __restrict__ bias", "const float* __restrict__ rstd", "const float* __restrict__ gain",
               "int M", "int N", "int K" },
    block = "BLOCK", grid = "cdiv(N, TILE_N), cdiv(M, TILE_M)", smem = "SMEM" },
}
-- No plan op binds it: under v2119 the device executor launches it itself for the GEMM+GELU sites
-- v2166 marks (runtime/device/exec_dev.c, matmul_gelu_fwd); every other GEMM stays cuBLASLt.
ops = {}
-- cost of one launch (generator/lua/perf.lua): every block runs cdiv(K, TILE_K) whole k-tiles
-- (the zero-filled edges cost mma too); A and B come from DRAM once, the other blocks of a row
-- (column) of the grid re-read them from L2; the epilogue's FMAs and GELU's exp.
cost = {
  gemm_bf16 = function(a)
    local gm, gn, kt = (a.M + a.TILE_M - 1) // a.TILE_M, (a.N + a.TILE_N - 1) // a.TILE_N, (a.K + a.TILE_K - 1) // a.TILE_K
    local mn = a.M * a.N
    local sw = a.EPILOGUE == "swiglu"
    return { tc_bf16 = 2 * gm * gn * kt * a.TILE_M * a.TILE_N * a.TILE_K,
             fp32 = sw and 3 * mn or (a.EPILOGUE == "bias_gelu" and 14 or a.EPILOGUE == "bias" and 1 or 0) * mn,
             sfu = sw and mn or a.EPILOGUE == "bias_gelu" and 2 * mn or 0,
             rd = 2 * (a.M + a.N) * a.K, wr = (a.OUT == "bf16" and 2 or 4) * (sw and (mn // 2 + (a.AUX and mn or 0)) or mn * (a.AUX and 2 or 1)),
             reread = 2 * ((gn - 1) * a.M * a.K + (gm - 1) * a.N * a.K) }
  end,
}
]]
{{ partial("common") }}
typedef {{ OUT == "bf16" and "hyp_bf16" or "float" }} out_t;
#include "hyp/mma.cuh"

// D = A B^T: A [M, K] and B [N, K] row-major bf16 (B is the weight [out, in] of a linear layer,
// exactly op_matmul_fwd's w), D [M, N] row-major. Block (bx, by) computes the TILE_M x TILE_N
// tile at (by*TILE_M, bx*TILE_N); warp w its (w / WARPS_N, w % WARPS_N) sub-tile of WTM x WTN.
//
// Pipeline: shared memory holds STAGES k-tiles of A and B ([TILE_M][LDS], [TILE_N][LDS] bf16);
// the tile kt + STAGES - 1 is copied (cp.async, one commit group per k-tile) while tile kt is
// multiplied. Copies are 16 bytes = 8 bf16 of a row: when K % 8 == 0 (every row 16-byte aligned;
// A and B themselves must be 16-byte aligned, as the runtime's arena is) cp.async with src-size
// < 16 zero-fills the columns past K and src-size 0 the rows past M / N; otherwise (odd K) the
// same chunks are plain guarded loads and shared stores, which the __syncthreads before a tile is
// read publishes like a completed copy. Zero rows / columns contribute exact zeros to the sums.
//
// Fragments (kernels/hyp/mma.cuh): A by ldmatrix.x4 from the row-major tile, B by ldmatrix.x4
// (non-transposed) from the tile holding B's rows — the n index — which is the "col" operand the
// mma wants; one x4 gives the b registers of two n8 tiles. Lane (g = lane/4, t = lane%4) ends
// with rows g, g + 8 of each m16 fragment and columns 2t, 2t + 1 of each n8 tile.
% if EPILOGUE == "swiglu" then
//
// SwiGLU: B is the fused [gate | up] weight [2H, K] (rows 0..H-1 gate, H..2H-1 up; N = 2H) and
// block x owns output columns j in [x TILE_N/2, (x+1) TILE_N/2). Its B tile is laid out per warp
// column: of warp wn's WTN tile rows, the first WTN/2 are gate rows j and the next WTN/2 the up rows
// H + j of the same j (j = x TILE_N/2 + wn WTN/2 + l), so every lane holds gate in acc[i][jn] and
// the matching up in acc[i][jn + NI/2]: D[m, j] = silu(gate) * up needs no exchange. Rows with
// j >= H are zero-filled like rows past N.
% end

% if EPILOGUE == "bias_gelu" then
// gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the tanh form, written as the
// gelu template and the cpu op write it.
__device__ __forceinline__ float gemm_gelu(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * (1.0f / (1.0f + expf(-2.0f * u)));
}
% end

// One k-tile of A (rows m0.., TILE_M) and B (rows n0.., TILE_N) at column k0 into stage buffers
// As, Bs (and the gain's TILE_K floats into Gs under the rmsnorm prologue).
__device__ __forceinline__ void gemm_load_tile(hyp_bf16* As, hyp_bf16* Bs, float* Gs, const hyp_bf16* A,
                                               const hyp_bf16* B, const float* gain, int M, int N, int K,
                                               int m0, int n0, int k0, bool vec) {
    constexpr int CPR = TILE_K / 8; // 16-byte chunks per tile row
#pragma unroll 1
    for (int e = threadIdx.x; e < (TILE_M + TILE_N) * CPR; e += BLOCK) {
        const bool isa = e < TILE_M * CPR;
        const int ee = isa ? e : e - TILE_M * CPR;
        const int r = ee / CPR, c = (ee - r * CPR) * 8;
% if EPILOGUE == "swiglu" then
        int grow = m0 + r, rows = M;
        if (!isa) { // warp column r / WTN, row l of it: gate j or up H + j (see above)
            const int l = r % WTN, j = n0 / 2 + (r / WTN) * (WTN / 2) + (l < WTN / 2 ? l : l - WTN / 2);
            rows = j < N / 2 ? N : 0;
            grow = l < WTN / 2 ? j : N / 2 + j;
        }
        const int gk = k0 + c;
% else
        const int grow = (isa ? m0 : n0) + r, rows = isa ? M : N, gk = k0 + c;
% end
        const hyp_bf16* base = isa ? A : B;
        hyp_bf16* dst = (isa ? As : Bs) + r * LDS + c;
        const int left = grow < rows ? K - gk : 0; // valid elements of this chunk (clamped below)
        if (vec) {
            const unsigned bytes = left <= 0 ? 0u : left >= 8 ? 16u : 2u * (unsigned)left;
            hyp_cp_async_16_zfill(dst, bytes ? base + (long)grow * K + gk : base, bytes);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                dst[i] = i < left ? base[(long)grow * K + gk + i] : __float2bfloat16_rn(0.0f);
        }
    }
% if PROLOGUE == "rmsnorm" then
    for (int e = threadIdx.x; e < TILE_K / 4; e += BLOCK) {
        const int gk = k0 + 4 * e, left = K - gk;
        if (vec) { // K % 8 == 0: gain + gk is 16-byte aligned
            const unsigned bytes = left <= 0 ? 0u : left >= 4 ? 16u : 4u * (unsigned)left;
            hyp_cp_async_16_zfill(Gs + 4 * e, bytes ? gain + gk : gain, bytes);
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) Gs[4 * e + i] = i < left ? gain[gk + i] : 0.0f;
        }
    }
% else
    (void)Gs; (void)gain;
% end
}

% if PROLOGUE == "rmsnorm" then
// The packed bf16 pair r (columns k, k + 1) times gain (g0, g1), rounded back to bf16.
__device__ __forceinline__ unsigned gemm_scale2(unsigned r, float g0, float g1) {
    return hyp_pack_bf16x2(__float2bfloat16_rn(__bfloat162float(hyp_bf16_lo(r)) * g0),
                           __float2bfloat16_rn(__bfloat162float(hyp_bf16_hi(r)) * g1));
}
% end

% if emit.gemm_bf16 then
{{ signature("gemm_bf16") }} {
    extern __shared__ __align__(16) unsigned char gemm_smem[];
    hyp_bf16* As = (hyp_bf16*)gemm_smem;               // [STAGES][TILE_M][LDS]
    hyp_bf16* Bs = As + STAGES * TILE_M * LDS;         // [STAGES][TILE_N][LDS]
    float* Gs = (float*)(Bs + STAGES * TILE_N * LDS);  // [STAGES][TILE_K] (rmsnorm only)
    const int m0 = blockIdx.y * TILE_M, n0 = blockIdx.x * TILE_N;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = (warp / WARPS_N) * WTM, wn = (warp % WARPS_N) * WTN;
    const bool vec = (K & 7) == 0;
    const int ktiles = (K + TILE_K - 1) / TILE_K;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) { // prologue of the pipeline: tiles 0..STAGES-2
        if (s < ktiles) gemm_load_tile(As + s * TILE_M * LDS, Bs + s * TILE_N * LDS, Gs + s * TILE_K, A, B, gain, M, N, K, m0, n0, s * TILE_K, vec);
        hyp_cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < ktiles; kt++) {
        hyp_cp_async_wait_group<STAGES - 2>(); // this thread's copies of tile kt have landed
        __syncthreads();                        // everyone's have; and tile kt-1's stage is free
        {
            const int nt = kt + STAGES - 1, s = nt % STAGES;
            if (nt < ktiles) gemm_load_tile(As + s * TILE_M * LDS, Bs + s * TILE_N * LDS, Gs + s * TILE_K, A, B, gain, M, N, K, m0, n0, nt * TILE_K, vec);
            hyp_cp_async_commit(); // an empty group past the end keeps wait_group's count right
        }
        const int s = kt % STAGES;
        const hyp_bf16* as = As + s * TILE_M * LDS;
        const hyp_bf16* bs = Bs + s * TILE_N * LDS;
#pragma unroll
        for (int kk = 0; kk < TILE_K; kk += 16) {
            unsigned a[MI][4], b[NI / 2][4];
#pragma unroll
            for (int i = 0; i < MI; i++)
                hyp_ldmatrix_x4(a[i], &as[(wm + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1)) * LDS + kk + 8 * (lane >> 4)]);
#pragma unroll
            for (int jp = 0; jp < NI / 2; jp++)
                hyp_ldmatrix_x4(b[jp], &bs[(wn + 16 * jp + (lane & 7) + 8 * (lane >> 4)) * LDS + kk + 8 * ((lane >> 3) & 1)]);
% if PROLOGUE == "rmsnorm" then
            { // a[i][0..1] hold columns kk + 2t, +1; a[i][2..3] columns kk + 2t + 8, +9
                const float* gs = Gs + s * TILE_K + kk + 2 * (lane & 3);
                const float g0 = gs[0], g1 = gs[1], g8 = gs[8], g9 = gs[9];
#pragma unroll
                for (int i = 0; i < MI; i++) {
                    a[i][0] = gemm_scale2(a[i][0], g0, g1);
                    a[i][1] = gemm_scale2(a[i][1], g0, g1);
                    a[i][2] = gemm_scale2(a[i][2], g8, g9);
                    a[i][3] = gemm_scale2(a[i][3], g8, g9);
                }
            }
% end
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) {
                    const unsigned bj[2] = { b[j / 2][2 * (j & 1)], b[j / 2][2 * (j & 1) + 1] };
                    hyp_mma_m16n8k16_bf16(acc[i][j], a[i], bj, acc[i][j]);
                }
        }
    }
    hyp_cp_async_wait_group<0>(); // the trailing empty groups (nothing may be in flight at exit)

    // epilogue: lane owns rows g, g + 8 of each m16 fragment, columns 2t, 2t + 1 of each n8 tile
% if EPILOGUE == "swiglu" then
    // gate acc[i][j], up acc[i][j + NI/2] of output column n0/2 + wn/2 + 8j + 2t + c; under bf16
    // output both are rounded first, so D is exactly what swiglu_fwd computes from the stored h.
    (void)bias;
    const int H = N / 2;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + wm + 16 * i + (lane >> 2) + 8 * h;
            if (row >= M) continue;
%   if PROLOGUE == "rmsnorm" then
            const float rs = rstd[row];
%   else
            (void)rstd;
%   end
#pragma unroll
            for (int j = 0; j < NI / 2; j++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int col = n0 / 2 + wn / 2 + 8 * j + 2 * (lane & 3) + c;
                    if (col >= H) continue;
                    float g = acc[i][j][2 * h + c], u = acc[i][j + NI / 2][2 * h + c];
%   if PROLOGUE == "rmsnorm" then
                    g *= rs;
                    u *= rs;
%   end
%   if OUT == "bf16" then
                    g = __bfloat162float(__float2bfloat16_rn(g));
                    u = __bfloat162float(__float2bfloat16_rn(u));
%   end
%   if AUX then
                    hyp_st(aux + (long)row * N + col, g);
                    hyp_st(aux + (long)row * N + H + col, u);
%   else
                    (void)aux;
%   end
                    hyp_st(D + (long)row * H + col, g * (1.0f / (1.0f + expf(-g))) * u);
                }
        }
% else
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + wm + 16 * i + (lane >> 2) + 8 * h;
            if (row >= M) continue;
% if PROLOGUE == "rmsnorm" then
            const float rs = rstd[row];
% else
            (void)rstd;
% end
            (void)aux;
#pragma unroll
            for (int j = 0; j < NI; j++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int col = n0 + wn + 8 * j + 2 * (lane & 3) + c;
                    if (col >= N) continue;
                    float v = acc[i][j][2 * h + c];
% if PROLOGUE == "rmsnorm" then
                    v *= rs;
% end
% if EPILOGUE == "bias" then
                    v += hyp_ld(bias + col);
% elseif EPILOGUE == "bias_gelu" then
                    v += hyp_ld(bias + col);
%   if AUX then
                    hyp_st(aux + (long)row * N + col, v);
%   end
                    v = gemm_gelu(v);
% else
                    (void)bias;
% end
                    hyp_st(D + (long)row * N + col, v);
                }
        }
% end
}
% end
