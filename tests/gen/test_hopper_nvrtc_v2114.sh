#!/usr/bin/env bash
# v2114 (the Hopper wrappers of kernels/hyp/hopper.cuh): NVRTC compiles tests/hopper/hopper_all.cu,
# which calls every wrapper, and the sim test kernels (hopper_sim.cu, the demonstration GEMM
# gemm_tma_wgmma.cu) for sm_90a with zero register spills (ptxas -v through
# --ptxas-options=-v), and the PTX of hopper_all.cu holds the real instructions (wgmma.mma_async from descriptors
# and from registers, fence/commit/wait_group, cp.async.bulk.tensor 2d/3d with complete_tx,
# TMA stores with bulk_group commit/wait, mbarrier init/arrive/expect_tx/try_wait.parity, fence.proxy.async, setmaxnreg inc/dec,
# bar.sync/bar.arrive with ids). Needs NVRTC; without it the checks are skipped, not failed.
# Never: runs a kernel (the sim tests of hopper.cuh do).
source "$(dirname "$0")/lib.sh"
CUDA=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-cc}
if [ ! -f "$CUDA/include/nvrtc.h" ] || ! ls "$CUDA"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  echo "ok   skipped: no NVRTC under $CUDA"
  finish; exit $?
fi
# compile FILE for ARCH with ptxas -v: the program log (ptxas's report) to stdout, the PTX to OUT
cat > "$TMP/nvrtc_v.c" <<'CEOF'
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    if (argc != 6) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *src = malloc((size_t)n + 1);
    if (!src || fread(src, 1, (size_t)n, f) != (size_t)n) return 2;
    src[n] = 0;
    fclose(f);
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, src, argv[1], 0, NULL, NULL) != NVRTC_SUCCESS) return 2;
    char arch[64], inc1[1024], inc2[1024];
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", argv[2]);
    snprintf(inc1, sizeof inc1, "--include-path=%s", argv[3]);
    snprintf(inc2, sizeof inc2, "--include-path=%s", argv[4]);
    const char *opts[] = {arch, inc1, inc2, "--std=c++17", "--ptxas-options=-v"};
    nvrtcResult r = nvrtcCompileProgram(p, 5, opts);
    size_t ls;
    nvrtcGetProgramLogSize(p, &ls);
    char *log = malloc(ls + 1);
    nvrtcGetProgramLog(p, log);
    printf("%s\n", log);
    if (r != NVRTC_SUCCESS) return 1;
    size_t ps;
    nvrtcGetPTXSize(p, &ps);
    char *ptx = malloc(ps);
    nvrtcGetPTX(p, ptx);
    FILE *o = fopen(argv[5], "wb");
    if (!o || fwrite(ptx, 1, ps - 1, o) != ps - 1) return 2;
    fclose(o);
    return 0;
}
CEOF
if ! $CC -O1 -I"$CUDA/include" "$TMP/nvrtc_v.c" -L"$CUDA/lib64" -lnvrtc -Wl,-rpath,"$CUDA/lib64" \
     -o "$TMP/nvrtc_v" > "$TMP/cc.log" 2>&1; then
  echo "FAIL building the NVRTC driver"; sed 's/^/    /' "$TMP/cc.log" | head -20
  FAIL=$((FAIL + 1)); finish; exit $?
fi
P="$TMP/hopper_all.ptx"
expect test_v2114_hopper_wrappers_sm90a_no_spills 0 "0 bytes spill stores, 0 bytes spill loads" -- \
  "$TMP/nvrtc_v" "$ROOT/tests/hopper/hopper_all.cu" sm_90a "$ROOT/kernels" "$CUDA/include" "$P"
for k in hopper_sim gemm_tma_wgmma; do # every kernel of the file spill-free: no nonzero spill count
  out=$("$TMP/nvrtc_v" "$ROOT/tests/hopper/$k.cu" sm_90a "$ROOT/kernels" "$CUDA/include" "$TMP/$k.ptx" 2>&1)
  check "test_v2114_${k}_sm90a_compiles_no_spills" bash -c "printf '%s' \"\$1\" | grep -q '0 bytes spill stores' && ! printf '%s' \"\$1\" | grep -Eq '[1-9][0-9]* bytes spill (stores|loads)'" _ "$out"
done
has() { [ -f "$P" ] && grep -Eq -- "$1" "$P"; }
for ins in 'wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16' 'wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16' \
           'wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16' 'wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 \{[^}]*\}, \{' \
           'wgmma.fence.sync.aligned' 'wgmma.commit_group.sync.aligned' 'wgmma.wait_group.sync.aligned 0' \
           'cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
           'cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' \
           'mbarrier.init.shared::cta.b64' 'mbarrier.arrive.shared::cta.b64' 'mbarrier.arrive.expect_tx.shared::cta.b64' \
           'mbarrier.expect_tx.relaxed.cta.shared::cta.b64' 'mbarrier.try_wait.parity.shared::cta.b64' \
           'fence.mbarrier_init.release.cluster' 'fence.proxy.async.shared::cta' \
           'cp.async.bulk.tensor.2d.global.shared::cta.bulk_group' 'cp.async.bulk.tensor.3d.global.shared::cta.bulk_group' \
           'cp.async.bulk.commit_group' 'cp.async.bulk.wait_group.read 0' \
           'setmaxnreg.inc.sync.aligned.u32 232' 'setmaxnreg.dec.sync.aligned.u32 40' 'bar.sync' 'bar.arrive'; do
  check "test_v2114_ptx_has ${ins//\\/}" has "$ins"
done
finish
