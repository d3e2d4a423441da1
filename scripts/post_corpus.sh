#!/usr/bin/env bash
# post_corpus.sh — post-training example sets made from a plain-text corpus (one passage per line,
# e.g. data/kjv.txt), for the SFT / preference measurements and tests (docs/post-training.md).
# Writes into OUTDIR:
#   pref.jsonl  {"prompt", "chosen", "rejected"}: prompt = the first words of a line, chosen = the
#               real continuation (the next words), rejected = the same words in a shuffled order
#   kto.jsonl   {"prompt", "completion", "label"}: each pair as a desirable and an undesirable line
#   chat.jsonl  {"messages": [user "Continue: <first half>", assistant "<second half>"]}
# Deterministic (awk's srand(SEED)); N lines taken at an even stride. Never: network or Python.
#   usage: scripts/post_corpus.sh CORPUS OUTDIR [N=600] [SEED=1]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 CORPUS OUTDIR [N] [SEED]" >&2; exit 2; }
CORPUS=$1 OUT=$2 N=${3:-600} SEED=${4:-1}
[ -s "$CORPUS" ] || { echo "$CORPUS: missing or empty corpus — give a text file" >&2; exit 2; }
mkdir -p "$OUT"
awk -v n="$N" -v seed="$SEED" -v out="$OUT" '
function esc(s) { gsub(/\\/, "\\\\\\\\", s); gsub(/"/, "\\\"", s); gsub(/\t/, " ", s); return s }
length($0) >= 90 { line[++L] = $0 }
END {
  srand(seed)
  stride = int(L / n); if (stride < 1) stride = 1
  made = 0
  for (i = 1; i <= L && made < n; i += stride) {
    k = split(line[i], w, " ")
    if (k < 12) continue
    np = int(k / 2); nc = 6
    p = w[1]; for (j = 2; j <= np; j++) p = p " " w[j]
    c = ""; for (j = np + 1; j <= np + nc; j++) { c = c " " w[j]; v[j - np] = w[j] }
    # rejected: the same nc words in a shuffled order (Fisher-Yates), redrawn until it differs
    for (t = 0; t < 10; t++) {
      for (j = nc; j > 1; j--) { r = int(rand() * j) + 1; x = v[j]; v[j] = v[r]; v[r] = x }
      rj = ""; for (j = 1; j <= nc; j++) rj = rj " " v[j]
      if (rj != c) break
    }
    if (rj == c) continue
    printf "{\"prompt\": \"%s\", \"chosen\": \"%s\", \"rejected\": \"%s\"}\n", esc(p), esc(c), esc(rj) > (out "/pref.jsonl")
    printf "{\"prompt\": \"%s\", \"completion\": \"%s\", \"label\": true}\n", esc(p), esc(c) > (out "/kto.jsonl")
    printf "{\"prompt\": \"%s\", \"completion\": \"%s\", \"label\": false}\n", esc(p), esc(rj) > (out "/kto.jsonl")
    rest = w[np + 1]; for (j = np + 2; j <= k; j++) rest = rest " " w[j]
    printf "{\"messages\": [{\"role\": \"user\", \"content\": \"Continue: %s\"}, {\"role\": \"assistant\", \"content\": \"%s\"}]}\n", esc(p), esc(rest) > (out "/chat.jsonl")
    made++
  }
  if (made == 0) { print "no usable lines (>= 90 characters, >= 12 words) in the corpus" > "/dev/stderr"; exit 2 }
}' "$CORPUS"
echo "wrote $OUT/pref.jsonl, kto.jsonl, chat.jsonl ($(wc -l < "$OUT/pref.jsonl") pairs)"
