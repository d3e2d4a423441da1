#!/usr/bin/env bash
# v2119: the templated tensor-core GEMM (templates/gemm.cu.lua) compiles with NVRTC for sm_80 and
# sm_90 with zero register spills, through `gen render --target sm_XX` (one family, its ptxas
# report on stderr: exit 1 on a spill without a spill_reason). Cases: the default tiles (128x128x32,
# 3 stages, 4 warps, 128 accumulators per lane) plain at sm_80, and with every option that adds
# registers (RMSNorm prologue, bias + GELU epilogue with aux, bf16 output) at sm_80 and sm_90, and the
# SwiGLU epilogue (gate and up accumulators paired in a lane, h stored to aux, bf16) at both. Bad input:
# a non-GPU --target is refused with exit 2. Without NVRTC: the refusal only (exit 2).
# Never: runs a kernel (test_gemm_sim_v2119 runs them under the simulator).
source "$(dirname "$0")/lib.sh"
export HYPERION_CACHE="$TMP/cache"
unset HYP_NVRTC_FLAGS HYP_NVRTC_DISABLE

probe=$("$GEN" render gemm --target sm_80 -o "$TMP/probe.cu" 2>&1)
if printf '%s' "$probe" | grep -q "without NVRTC"; then
  echo "skipped: this gen was built without NVRTC (no CUDA toolkit at configure time)"
  expect test_v2119_render_target_needs_nvrtc 2 "without NVRTC" -- "$GEN" render gemm --target sm_80 -o "$TMP/x.cu"
  finish; exit $?
fi
expect test_v2119_gemm_sm80_no_spills 0 "gemm_bf16: [0-9]+ registers, 0 bytes spilled.*\(sm_80\)" -- "$GEN" render gemm --target sm_80 -o "$TMP/a.cu"
FULL=(PROLOGUE=rmsnorm EPILOGUE=bias_gelu AUX=true OUT=bf16)
for arch in sm_80 sm_90; do
  expect "test_v2119_gemm_rms_gelu_bf16_${arch}_no_spills" 0 "gemm_bf16: [0-9]+ registers, 0 bytes spilled.*\($arch\)" -- "$GEN" render gemm "${FULL[@]}" --target $arch -o "$TMP/b_$arch.cu"
done
SWIGLU=(PROLOGUE=rmsnorm EPILOGUE=swiglu AUX=true OUT=bf16)
for arch in sm_80 sm_90; do
  expect "test_v2119_gemm_swiglu_bf16_${arch}_no_spills" 0 "gemm_bf16: [0-9]+ registers, 0 bytes spilled.*\($arch\)" -- "$GEN" render gemm "${SWIGLU[@]}" --target $arch -o "$TMP/s_$arch.cu"
done
expect test_v2119_render_target_bad_arch 2 "--target cpu: gen render compiles for a GPU arch only" -- "$GEN" render gemm --target cpu -o "$TMP/c.cu"
finish
