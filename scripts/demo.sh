#!/usr/bin/env bash
# The main job: installs dependencies, builds, prepares the default corpus (the King James Bible,
# public domain, from Debian's bible-kjv package), generates a trainer for the `tiny` model with
# the quick-start optimizer specs, trains it on the CPU for about two minutes, and samples text.
# Environment: STEPS (default 1000), THREADS (default all cores), OUT (default out/tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
GEN=build/generator/gen
OUT=${OUT:-out/tiny}
STEPS=${STEPS:-1000}
export OMP_NUM_THREADS=${THREADS:-$(nproc)}

# 1. the default corpus: ~4.4 MB of English text, verse references stripped
mkdir -p data
if [ ! -s data/kjv.txt ]; then
  bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
[ -d data/kjv ] || $GEN data data/kjv.txt -o data/kjv

# 2. generate the trainer: AdamW with decoupled decay, warmup + cosine, global-norm clipping,
#    the static memory plan, and TensorBoard event files in $OUT/runs (v2183)
$GEN specs/v2500.yaml --enable adamw,warmup,cosine,clip,memory-planning,tensorboard --model tiny --target cpu \
     --batch 16 --seq 128 -o "$OUT"
$GEN audit "$OUT" | sed -n '1,12p'

# 3. train, evaluate, checkpoint, sample: on a terminal one progress line updated in place (bar, loss,
#    tokens/s, ETA) with the evaluation steps kept as log lines; piped to a file, a log line per
#    step (or --log-every N)
"$OUT/train" --data data/kjv --steps "$STEPS" --eval-every 100 --eval-batches 16 \
   --metrics "$OUT/metrics.jsonl" --ckpt-dir "$OUT/ckpt" --ckpt-every 500 --sample 400
