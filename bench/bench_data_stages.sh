#!/usr/bin/env bash
# gen data's stages on the two real corpora, side by side in one run: the King James Bible as one
# document per chapter (1,189 long documents, from Debian's bible-kjv) and Debian's fortunes (one
# document per fortune, ~15,000 short ones, --doc-sep %). Prints
#   dedup throughput (v2122, exact + MinHash LSH at the spec defaults: 5-word shingles, 128
#     permutations, 16 bands x 8 rows, threshold 0.8): documents/s and MB/s of the stage alone
#     (tests/tools/dedup_eval), the median of $ROUNDS interleaved rounds, and what it removed;
#   planted near-duplicates: precision and recall against brute-force Jaccard (dedup_eval planted)
#     at 128 and 256 permutations;
#   filter counts (v2123 at the Gopher defaults): documents failing and removed per rule.
# Usage: bench/bench_data_stages.sh [BUILD_DIR]   (ROUNDS=5 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; ROUNDS=${ROUNDS:-5}
GEN="$BUILD/generator/gen"; EVAL="$BUILD/tests/dedup_eval"
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
command -v bible >/dev/null || { echo "bible (Debian bible-kjv) missing: run scripts/install-deps.sh" >&2; exit 2; }
[ -d /usr/share/games/fortunes ] || { echo "fortunes missing: run scripts/install-deps.sh" >&2; exit 2; }
bible -f 'Gen1:1-Rev22:21' | python3 -c '
import json, re, sys
chap, cur = None, []
out = open(sys.argv[1], "w")
for line in sys.stdin:
    m = re.match(r"^([0-9A-Za-z]+?)(\d+):(\d+) (.*)$", line.rstrip("\n"))
    if not m: continue
    key = (m.group(1), m.group(2))
    if key != chap and cur:
        out.write(json.dumps({"text": "\n".join(cur) + "\n"}) + "\n"); cur = []
    chap = key; cur.append(m.group(4))
if cur: out.write(json.dumps({"text": "\n".join(cur) + "\n"}) + "\n")
' "$TMP/kjv_chapters.jsonl"
for f in /usr/share/games/fortunes/*; do case "$f" in *.dat|*.u8) ;; *) cat "$f";; esac; done > "$TMP/fortunes.txt"

echo "# dedup (v2122) throughput, stage alone, median of $ROUNDS interleaved rounds"
echo "corpus,documents,MB,docs_per_s,MB_per_s,exact_removed,near_removed"
for r in $(seq "$ROUNDS"); do
  "$EVAL" file "$TMP/kjv_chapters.jsonl" "" >> "$TMP/kjv.jsonl"
  "$EVAL" file "$TMP/fortunes.txt" "%" >> "$TMP/fort.jsonl"
done
for c in kjv fort; do
  python3 - "$TMP/$c.jsonl" "$c" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = rows[0]
name = {"kjv": "kjv-chapters", "fort": "fortunes"}[sys.argv[2]]
print("%s,%d,%.2f,%.0f,%.2f,%d,%d" % (name, r["documents"], r["bytes"] / 1e6,
      statistics.median(x["docs_per_s"] for x in rows), statistics.median(x["MB_per_s"] for x in rows),
      r["exact_removed"], r["near_removed"]))
PY
done

echo "# planted near-duplicates vs brute-force Jaccard (threshold 0.8, 5-word shingles)"
echo "num_perm,bands,documents,true_duplicates,removed,precision,recall,recall_J_0.8_0.85,recall_J_0.85_0.9,recall_J_ge_0.9,removed_with_J_below_0.65,docs_per_s"
for cfg in "128 16" "256 32"; do
  set -- $cfg
  "$EVAL" planted 800 1 5 "$1" "$2" 0.8 | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); b = r["recall_by_true_jaccard"]
hi = [b["[0.9,0.95)"], b["[0.95,1]"]]
print("%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%d,%.0f" % (r["num_perm"], r["bands"], r["documents"], r["true_duplicates"],
      r["removed"], r["precision"], r["recall"], b["[t,0.85)"]["recall"], b["[0.85,0.9)"]["recall"],
      sum(x["recall"] * x["documents"] for x in hi) / max(1, sum(x["documents"] for x in hi)),
      r["removed_below_threshold_minus_0.15"], r["docs_per_s"]))'
done

echo "# filter (v2123) at the Gopher defaults: documents failing / removed (first failing rule) per rule"
"$GEN" data "$TMP/kjv_chapters.jsonl" --enable filter -o "$TMP/fk" >/dev/null 2>&1 || true
"$GEN" data "$TMP/fortunes.txt" --doc-sep % --enable filter -o "$TMP/ff" >/dev/null 2>&1 || true
"$GEN" data "$TMP/fortunes.txt" --doc-sep % --enable filter --set filter.min_words=5 -o "$TMP/ff5" >/dev/null 2>&1 || true
python3 - "$TMP" <<'PY'
import json, os, sys
runs = [("kjv-chapters", "fk"), ("fortunes", "ff"), ("fortunes min_words=5", "ff5")]
reps = {}
for name, d in runs:
    p = os.path.join(sys.argv[1], d, "report.json")
    reps[name] = json.load(open(p))["stages"][0] if os.path.exists(p) else None
rules = next(r for r in reps.values() if r)["failed_by_rule"].keys()
print("rule," + ",".join("%s failing,%s removed" % (n, n) for n, _ in runs))
for rule in rules:
    print(rule + "," + ",".join("%d,%d" % (r["failed_by_rule"][rule], r["removed_by_rule"][rule]) if r else "-,-" for r in reps.values()))
print("documents in -> out," + ",".join("%d -> %d," % (r["documents_in"], r["documents_out"]) if r else "all removed," for r in reps.values()))
PY
