#!/usr/bin/env bash
# bench_bpe_vs_bytes.sh — v2125 (issue 13): the same tiny model shape trained on bytes (vocab 256)
# and on BPEs trained on the train split (vocab 2048, 8192), each for the same wall-clock budget on
# one thread, side by side in one run; compared in bits per byte of the SAME held-out text.
# The held-out text is the last 5 % of kjv.txt's lines; train text is the rest. Every data directory
# is assembled from two `gen data --val-fraction 0` outputs (train text -> train shard, held-out text
# -> val shard), so the val split is exactly the held-out text for every tokenizer.
# bits/byte = mean val loss (nats/token) x tokens in held-out / (ln 2 x bytes in held-out).
# Each model trains for --deadline S (exit 3, checkpoint), then one more step (--resume --stop-after 1)
# validates it over every whole B x T batch of the held-out split (the coverage column says how much).
# "Equal steps" = mean training loss of the 20 steps up to the fewest steps any model did, in the
# first epoch for every model at 75 s (unseen text), x train tokens / (ln 2 x train bytes).
# The embedding and the tied head grow with V (V x C parameters): the BPE models are larger.
# Must never: touch data/ or out/ of the repository (all in a temp dir), need the network.
# Usage: bench/bench_bpe_vs_bytes.sh [BUILD_DIR] [SECONDS_PER_RUN] [VOCABS]   (default build 60 "2048 8192")
set -euo pipefail
BUILD=${1:-build}; S=${2:-60}; VOCABS=${3:-"2048 8192"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GEN="$ROOT/$BUILD/generator/gen"; [ -x "$GEN" ] || GEN="$BUILD/generator/gen"
[ -x "$GEN" ] || { echo "bench_bpe_vs_bytes: $GEN missing — build first (bash scripts/build.sh)"; exit 2; }
command -v bible >/dev/null || { echo "bench_bpe_vs_bytes: bible missing — apt-get install bible-kjv"; exit 2; }
TMP=$(mktemp -d /tmp/bench-bpe.XXXXXX); trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
STEPS=100000   # every run stops by --deadline; the tiny plan's LR is constant (2e-3, no warmup), so --steps shapes nothing
B=8; T=256     # one batch shape for all, T = tiny's context (B*T tokens per step: a BPE step and window see more text)
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); budget ${S} s per run, OMP_NUM_THREADS=1, B=$B T=$T"
bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' > "$TMP/kjv.txt"
NL=$(wc -l < "$TMP/kjv.txt"); NH=$((NL / 20))
head -n $((NL - NH)) "$TMP/kjv.txt" > "$TMP/train.txt"
tail -n $NH "$TMP/kjv.txt" > "$TMP/held.txt"
HB=$(wc -c < "$TMP/held.txt")
echo "kjv.txt $(wc -c < "$TMP/kjv.txt") bytes; train $(wc -c < "$TMP/train.txt") bytes; held-out (last $NH lines) $HB bytes"

# DIR <- train shard of train.txt + val shard of held.txt, both encoded with tokenizer TK
mkdata() {
  local tk=$1 d=$2
  "$GEN" data "$TMP/train.txt" -o "$d.tr" --val-fraction 0 --tokenizer "$tk" > /dev/null
  "$GEN" data "$TMP/held.txt" -o "$d.va" --val-fraction 0 --tokenizer "$tk" > /dev/null
  mkdir -p "$d"; cp "$d.tr"/* "$d"/
  cp "$d.va/train_000000.bin" "$d/val_000000.bin"; cp "$d.va/train_000000.docs" "$d/val_000000.docs"
  python3 - "$d" "$d.va/meta.json" <<'PYEOF'
import json, sys
d, vm = sys.argv[1], json.load(open(sys.argv[2]))
m = json.load(open(d + "/meta.json"))
sh = dict(vm["shards"][0]); sh["file"] = "val_000000.bin"; sh["split"] = "val"
m["shards"].append(sh); m["val_tokens"] = vm["train_tokens"]
m["documents"] = m.get("documents", 0) + vm.get("documents", 0)
json.dump(m, open(d + "/meta.json", "w"), indent=1)
PYEOF
}

NAMES="bytes"; mkdata byte "$TMP/d_bytes"
for V in $VOCABS; do
  "$GEN" tokenizer train "$TMP/train.txt" --vocab "$V" -o "$TMP/bpe$V" > /dev/null
  mkdata "$TMP/bpe$V/tokenizer.json" "$TMP/d_bpe$V"; NAMES="$NAMES bpe$V"
done
for n in $NAMES; do
  if [ "$n" = bytes ]; then "$GEN" "$ROOT/specs/v2500.yaml" --enable adamw --model tiny --target cpu -o "$TMP/o_$n" > /dev/null 2>&1
  else "$GEN" "$ROOT/specs/v2500.yaml" --enable adamw,bpe --set "v2125.data=$TMP/d_$n" --model tiny --target cpu -o "$TMP/o_$n" > /dev/null 2>&1; fi
done

# train each for S seconds, one after the other (same machine, same load window as far as possible)
for n in $NAMES; do
  rc=0
  "$TMP/o_$n/train" --data "$TMP/d_$n" --steps $STEPS --batch $B --seq $T --eval-every 0 --deadline "$S" \
    --ckpt-dir "$TMP/c_$n" --metrics "$TMP/m_$n.jsonl" --log-every 1000000 --tensorboard none \
    --profile none --memory-profile none > "$TMP/log_$n" 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || { echo "train $n failed ($rc):"; tail -5 "$TMP/log_$n"; exit 1; }
done
# evaluate every model on the whole held-out split: resume for one more step, then validate
for n in $NAMES; do
  VT=$(python3 -c "import json;print(json.load(open('$TMP/d_$n/meta.json'))['val_tokens'])")
  NB=$(( (VT - 1) / T / B ))   # whole batches of T-token windows in the held-out split
  echo "$n $NB" > "$TMP/nb_$n"
  rc=0
  "$TMP/o_$n/train" --data "$TMP/d_$n" --steps $STEPS --batch $B --seq $T --resume --ckpt-dir "$TMP/c_$n" \
    --stop-after 1 --eval-every 1 --eval-batches "$NB" --metrics "$TMP/e_$n.jsonl" --log-every 1000000 \
    --tensorboard none --profile none --memory-profile none > "$TMP/elog_$n" 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || { echo "eval $n failed ($rc):"; tail -5 "$TMP/elog_$n"; exit 1; }
done
python3 - "$TMP" "$HB" "$B" "$T" $NAMES <<'PYEOF'
import json, math, sys
tmp, hb, B, T, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
rows = {}
for n in names:
    m = json.load(open(f"{tmp}/d_{n}/meta.json"))
    tr = [json.loads(l) for l in open(f"{tmp}/m_{n}.jsonl") if l.strip()]
    tr = [r for r in tr if "loss" in r and "step" in r]
    ev = [json.loads(l) for l in open(f"{tmp}/e_{n}.jsonl") if l.strip()]
    vl = [r["val_loss"] for r in ev if r.get("val_loss") is not None]
    nb = int(open(f"{tmp}/nb_{n}").read().split()[1])
    vt, ttok = m["val_tokens"], m["train_tokens"]
    tps = [r["tokens_per_s_mean"] for r in tr if "tokens_per_s_mean" in r]
    rows[n] = dict(V=m["vocab_size"], steps=tr[-1]["step"], tps=tps[-1] if tps else float("nan"),
                   vl=vl[-1], vt=vt, cover=nb * B * T / (vt - 1), tbpt=m["sources"][0]["bytes"] / ttok,  # train bytes per train token
                   losses={r["step"]: r["loss"] for r in tr})
kmin = min(r["steps"] for r in rows.values())
print(f"held-out: {hb} bytes; bits/byte = val loss x held-out tokens / (ln 2 x {hb})")
print("| tokenizer | V | held-out tokens (bytes/token) | steps in budget | tokens/s | val coverage | val loss (nats/token) | bits/byte (equal time) | train bits/byte at step %d (equal steps) |" % kmin)
print("|---|---|---|---|---|---|---|---|---|")
for n, r in rows.items():
    bpb = r["vl"] * r["vt"] / (math.log(2) * hb)
    win = [r["losses"][s] for s in range(kmin - 19, kmin + 1) if s in r["losses"]]
    tb = (sum(win) / len(win)) / (math.log(2) * r["tbpt"])
    print(f"| {n} | {r['V']} | {r['vt']} ({hb / r['vt']:.3f}) | {r['steps']} | {r['tps']:.0f} | {100 * r['cover']:.1f} % | {r['vl']:.4f} | {bpb:.4f} | {tb:.4f} |")
PYEOF
for n in $NAMES; do echo "$n: $(grep -m1 "hyperion trainer" "$TMP/log_$n"; grep -m1 "^data:" "$TMP/log_$n" || true)"; done
