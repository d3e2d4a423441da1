#!/usr/bin/env bash
# gen size --mesh (generator/lua/size_mesh.lua): a dp x pp x cp x tp mesh sized by formulas. Checks
# one fixed mesh of llama3-70b on 64 H100s against the formulas recomputed here from the model's
# dimensions (L 80, d 8192, 8 KV heads of 128; micro-batch 1, seq 4096, 512,000 tokens per step):
#   m = round(512000 / (dp·1·4096)); bubble = (pp-1)/(m+pp-1);
#   tp bytes/GPU/step = (L/pp)·m·4·2(tp-1)/tp·(4096/cp)·8192·2; dp = 2(dp-1)/dp·(N/(tp·pp))·2;
# that `auto` lists only valid meshes, best first, and says so when none fits (70B on 8 GPUs:
# 16 B/param of model state alone is 140 GB per GPU); bad meshes exit 2 with the reason.
source "$(dirname "$0")/lib.sh" "$1"
S=(size --model llama3-70b --hw h100-sxm)
expect mesh_fixed 0 "dp4 pp2 cp1 tp8" -- "$GEN" "${S[@]}" --gpus 64 --mesh tp=8,pp=2
row=$("$GEN" "${S[@]}" --gpus 64 --mesh tp=8,pp=2 | grep "dp4 pp2 cp1 tp8")
echo "    $row"
N=$("$GEN" "${S[@]}" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['inputs']['N']['value'])")
check test_v2106_v2107_mesh_bytes_and_bubble_equal_the_formulas python3 - "$row" "$N" <<'PY'
import sys
f = sys.argv[1].split(); N = float(sys.argv[2])
tp, pp, cp, dp, L, C, s = 8, 2, 1, 4, 80, 8192, 4096
m = round(512000 / (dp * 1 * s))
bubble = (pp - 1) / (m + pp - 1)
tpb = (L / pp) * m * 4 * 2 * (tp - 1) / tp * (s / cp) * C * 2
dpb = 2 * (dp - 1) / dp * (N / (tp * pp)) * 2
ppb = m * 2 * (s / cp) * C * 2 / tp
def gb(x): return f"{x / 1e9:.2f}" if x >= 1e9 else f"{x / 1e6:.0f}"
got = {"m": f[4], "bubble": f[5], "tp": f[8], "pp": f[12], "dp": f[14]}
want = {"m": str(m), "bubble": f"{100 * bubble:.1f}%", "tp": gb(tpb), "pp": gb(ppb), "dp": gb(dpb)}
print("    got", got, "want", want)
sys.exit(0 if got == want else 1)
PY
expect mesh_auto_64 0 "suggested: tp [0-9]+, pp [0-9]+, cp [0-9]+, dp [0-9]+" -- "$GEN" "${S[@]}" --gpus 64 --mesh auto --recompute selective
check mesh_auto_rows_valid bash -c "'$GEN' ${S[*]} --gpus 64 --mesh auto | grep -E '^  dp[0-9]+ pp' | awk '{ d = substr(\$1, 3); p = substr(\$2, 3); c = substr(\$3, 3); t = substr(\$4, 3); if (d * p * c * t != 64 || 80 % p || 64 % t) bad = 1; n++ } END { exit bad || n < 1 }'"
expect test_mesh_70b_on_8_does_not_fit 0 "no mesh of 8 GPUs fits" -- "$GEN" "${S[@]}" --gpus 8 --mesh auto
expect mesh_needs_gpus 2 "--mesh needs the GPU count" -- "$GEN" "${S[@]}" --mesh auto
expect mesh_tp_not_dividing 2 "tp·pp·cp = 3 does not divide 64 GPUs" -- "$GEN" "${S[@]}" --gpus 64 --mesh tp=3
expect mesh_pp_not_dividing_layers 2 "pp 3 does not divide the 80 layers" -- "$GEN" "${S[@]}" --gpus 48 --mesh pp=3
expect mesh_bad_item 2 "--mesh item 'ep=2' is not tp=N, pp=N or cp=N" -- "$GEN" "${S[@]}" --gpus 64 --mesh ep=2
finish
