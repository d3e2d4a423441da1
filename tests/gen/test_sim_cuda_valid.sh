# test_sim_cuda_valid.sh — the simulator's test kernels (tests/sim/*.cu) and the shared device
# headers (kernels/hyp/*.cuh) are valid CUDA: NVRTC compiles each for sm_80 and sm_90, and the
# device side of the wrappers emits the real instructions (mma.sync m16n8k16 bf16, ldmatrix,
# cp.async), not the HYP_SIM emulation. Needs NVRTC (CUDA_HOME or /usr/local/cuda); without it
# the checks are skipped, not failed.
. "$(dirname "$0")/lib.sh"

CUDA=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-cc}
if [ ! -f "$CUDA/include/nvrtc.h" ] || ! ls "$CUDA"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  echo "ok   skipped: no NVRTC under $CUDA"
  finish
  exit $?
fi

# A minimal NVRTC driver: compile FILE for ARCH, write the PTX, print the log on failure.
cat > "$TMP/nvrtc_check.c" <<'EOF'
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
    const char *opts[] = {arch, inc1, inc2, "--std=c++17"};
    nvrtcResult r = nvrtcCompileProgram(p, 4, opts);
    size_t ls;
    nvrtcGetProgramLogSize(p, &ls);
    char *log = malloc(ls + 1);
    nvrtcGetProgramLog(p, log);
    if (r != NVRTC_SUCCESS) {
        printf("%s\n%s %s: %s\n", log, argv[1], argv[2], nvrtcGetErrorString(r));
        return 1;
    }
    size_t ps;
    nvrtcGetPTXSize(p, &ps);
    char *ptx = malloc(ps);
    nvrtcGetPTX(p, ptx);
    FILE *o = fopen(argv[5], "wb");
    if (!o || fwrite(ptx, 1, ps - 1, o) != ps - 1) return 2;
    fclose(o);
    return 0;
}
EOF
if ! $CC -O1 -I"$CUDA/include" "$TMP/nvrtc_check.c" -L"$CUDA/lib64" -lnvrtc -Wl,-rpath,"$CUDA/lib64" \
     -o "$TMP/nvrtc_check" > "$TMP/cc.log" 2>&1; then
  echo "FAIL building the NVRTC driver"; sed 's/^/    /' "$TMP/cc.log" | head -20
  FAIL=$((FAIL + 1))
  finish
  exit $?
fi

for cu in "$ROOT"/tests/sim/*.cu; do
  name=$(basename "$cu" .cu)
  for arch in sm_80 sm_90; do
    expect "tests/sim/$name.cu compiles with NVRTC for $arch" 0 "" -- \
      "$TMP/nvrtc_check" "$cu" "$arch" "$ROOT/kernels" "$CUDA/include" "$TMP/$name.$arch.ptx"
  done
done

# Every header alone (an include order that happens to work must not hide a missing include).
for h in "$ROOT"/kernels/hyp/*.cuh; do
  hn=$(basename "$h")
  printf '#include "hyp/%s"\n' "$hn" > "$TMP/only_$hn.cu"
  expect "kernels/hyp/$hn compiles alone with NVRTC for sm_80" 0 "" -- \
    "$TMP/nvrtc_check" "$TMP/only_$hn.cu" sm_80 "$ROOT/kernels" "$CUDA/include" "$TMP/only_$hn.ptx"
done

has() { [ -f "$1" ] && grep -q -- "$2" "$1"; }
for arch in sm_80 sm_90; do
  P="$TMP/mma.$arch.ptx"
  check "$arch PTX has mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" has "$P" "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  check "$arch PTX has ldmatrix .x4 and .x4.trans" \
    sh -c "grep -q 'ldmatrix.sync.aligned.m8n8.x4.shared.b16' '$P' && grep -q 'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16' '$P'"
  check "$arch PTX has cp.async.cg (plain and zero-fill), commit_group, wait_group 0 and 1" \
    sh -c "grep -Eq 'cp.async.cg.shared.global \[[^]]*\], \[[^]]*\], 16;' '$P' && grep -Eq 'cp.async.cg.shared.global \[[^]]*\], \[[^]]*\], 16, %r' '$P' && grep -q 'cp.async.wait_group 1' '$P' && grep -q 'cp.async.wait_group 0' '$P' && grep -q 'cp.async.commit_group' '$P'"
  check "$arch PTX of basic.cu has shfl.sync.bfly/up/down/idx and vote.sync.ballot" \
    sh -c "for i in shfl.sync.bfly shfl.sync.up shfl.sync.down shfl.sync.idx vote.sync.ballot; do grep -q \$i '$TMP/basic.$arch.ptx' || exit 1; done"
done

finish
