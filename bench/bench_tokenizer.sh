#!/usr/bin/env bash
# bench_tokenizer.sh — v2125 side by side on this machine, in one run: BPE training time (vocab
# 8192 and 32768 on data/kjv.txt), bytes per token of the trained BPEs and of GPT-2's vocabulary on
# both corpora (data/kjv.txt; Debian's fortunes), and encode throughput of our C encoder against
# tiktoken (GPT-2's ranks, encode_ordinary, single thread) and Hugging Face `tokenizers` (our
# trained tokenizer.json) on the same text. tiktoken/tokenizers are used only when a Python with
# them is found (PY=..., default /tmp/tbvenv/bin/python); CI never runs this.
# Usage: bench/bench_tokenizer.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
BUILD=${1:-build}; R=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GEN="$BUILD/generator/gen"; BT="$BUILD/bench/bench_tokenizer"
PY=${PY:-/tmp/tbvenv/bin/python}
TMP=$(mktemp -d /tmp/bench-tok.XXXXXX); trap 'rm -rf "$TMP"' EXIT
KJV="$ROOT/data/kjv.txt"
[ -s "$KJV" ] || { echo "bench_tokenizer: $KJV missing — run scripts/demo.sh once (it writes it)"; exit 2; }
FORT="$TMP/fortunes.txt"
cat /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers /usr/share/games/fortunes/literature \
  /usr/share/games/fortunes/people /usr/share/games/fortunes/wisdom 2>/dev/null > "$FORT" || true
GPT2="$ROOT/assets/tokenizers/gpt2.tiktoken.gz"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
for V in 8192 32768; do
  /usr/bin/time -f "%e s %M KB" -o "$TMP/time" "$GEN" tokenizer train "$KJV" --vocab $V -o "$TMP/bpe$V" > "$TMP/train.log"
  echo "train BPE vocab $V on kjv.txt ($(wc -c < "$KJV") bytes): $(cat "$TMP/time") wall/RSS"
done
for corpus in "$KJV" "$FORT"; do
  [ -s "$corpus" ] || continue
  echo "== $(basename "$corpus") ($(wc -c < "$corpus") bytes)"
  for tk in "$TMP/bpe8192/tokenizer.json" "$TMP/bpe32768/tokenizer.json" "$GPT2"; do
    name=$(basename "$(dirname "$tk")"); [ "$tk" = "$GPT2" ] && name=gpt2
    echo "  ours      $name: $("$BT" "$tk" "$corpus" "$R")"
  done
  if [ -x "$PY" ] && "$PY" -c "import tiktoken, tokenizers" 2>/dev/null; then
    "$PY" - "$GPT2" "$corpus" "$TMP/bpe8192/tokenizer.json" "$R" <<'PYEOF'
import base64, gzip, statistics, sys, time
import tiktoken
from tokenizers import Tokenizer
gpt2, corpus, bpe, R = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ranks = {}
for line in gzip.open(gpt2, "rb"):
    if line.strip():
        b, r = line.split(); ranks[base64.b64decode(b)] = int(r)
pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
text = open(corpus, encoding="utf-8", errors="replace").read()
nb = len(text.encode("utf-8"))
def bench(name, f):
    mbs = []
    for _ in range(R):
        t = time.perf_counter(); ids = f(); mbs.append(nb / (time.perf_counter() - t) / 1e6)
    print("  %-9s %s: bytes %d tokens %d bytes_per_token %.3f encode_MBps_best %.2f median %.2f (reps %d)" %
          (name.split()[0], name.split()[1], nb, len(ids), nb / len(ids), max(mbs), statistics.median(mbs), R))
def tk():  # a fresh Encoding per run would re-read ranks; tiktoken keeps no cache between calls
    return enc.encode_ordinary(text)
enc = tiktoken.Encoding(name="gpt2_bench", pat_str=pat, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
bench("tiktoken gpt2", tk)
hf = Tokenizer.from_file(bpe)
bench("tokenizers bpe8192", lambda: hf.encode(text, add_special_tokens=False).ids)
PYEOF
  else
    echo "  (no Python with tiktoken and tokenizers at $PY: reference throughput skipped)"
  fi
done
