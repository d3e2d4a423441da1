#!/usr/bin/env bash
# The op profiler's overhead (v2184): one trainer, the same steps with every step after warm-up
# profiled (--profile, --profile-steps 6:STEPS) and without, run in alternation PAIRS times; the
# median step time of steps 6.. (the metrics log's step_s) of each, their ratio, and the per-op
# table of the last profiled run. Usage: bench/bench_profile.sh [BUILD_DIR] [MODEL] [B] [T] [STEPS] [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; MODEL=${2:-tiny}; B=${3:-4}; T=${4:-32}; STEPS=${5:-60}; PAIRS=${6:-3}
export OMP_NUM_THREADS=${THREADS:-1}
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$BUILD/generator/gen" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
"$BUILD/generator/gen" specs/v2500.yaml --enable adamw,clip,memory-planning --model "$MODEL" --target cpu --batch "$B" --seq "$T" -o "$TMP/t" >/dev/null 2>&1
A=(--data "$TMP/data" --steps "$STEPS" --eval-every 0 --sample 0)
for i in $(seq "$PAIRS"); do
  "$TMP/t/train" "${A[@]}" --metrics "$TMP/off$i.jsonl" >/dev/null
  "$TMP/t/train" "${A[@]}" --metrics "$TMP/on$i.jsonl" --profile "$TMP/trace.json" --profile-steps "6:$STEPS" > "$TMP/on.log"
done
python3 - "$TMP" "$PAIRS" "$MODEL" "$B" "$T" "$OMP_NUM_THREADS" <<'EOF'
import json, statistics, sys
d, pairs = sys.argv[1], int(sys.argv[2])
def med(tag):
    return statistics.median(json.loads(l)["step_s"] for i in range(1, pairs + 1) for l in open(f"{d}/{tag}{i}.jsonl")
                             if json.loads(l)["step"] >= 6)
off, on = med("off"), med("on")
print(f"{sys.argv[3]} B={sys.argv[4]} T={sys.argv[5]} threads={sys.argv[6]}: median step {off * 1e3:.3f} ms without, "
      f"{on * 1e3:.3f} ms with profiling: ratio {on / off:.4f} ({pairs} alternating pairs)")
EOF
sed -n '/^profile:/,/sum of/p' "$TMP/on.log"
