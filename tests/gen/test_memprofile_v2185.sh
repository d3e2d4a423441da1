#!/usr/bin/env bash
# v2185 memory profile from real trainers: `train --memory-profile FILE.svg` writes a well-formed
# SVG (xmllint where installed, else Python's XML parser) whose arena timeline has one bar per
# activation buffer and whose peak list is exactly the buffers live at the peak as computed here,
# independently, from plan.json's op lists, summing to the plan's act_bytes_peak_live (with and
# without recompute, v2101, which reorders the schedule); measured vs planned: the activation
# arena's high-water mark equals the end of the plan's highest buffer (cpu), and the peak RSS grown
# after the executors were built lies between the planned executor bytes and planned x 1.05 +
# 12 MiB (the loader, oneDNN/OpenMP and thread stacks are not in the plan); the sentinel fill leaves
# the losses bit-identical; a v2185 trainer writes OUT/memory.svg by default, `none` turns it off;
# a bad path exits 2 before training. ~25 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SEL=adamw,clip,memory-planning
expect gen_plain 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/t"
expect gen_v2185 0 "v2185 memory_profiling is partial" -- "$GEN" specs/v2500.yaml --enable $SEL,memory-profile --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/p"
expect gen_recompute 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL,recompute --model tiny-llama --target cpu --batch 4 --seq 32 -o "$TMP/r"
check test_v2185_plan_has_memory_profile_section grep -q '"memory_profile"' "$TMP/p/plan.json"
C=(--data "$TMP/data" --steps 4 --eval-every 0 --sample 0)

wellformed() {
  if command -v xmllint >/dev/null; then xmllint --noout "$1"; else python3 -c "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])" "$1"; fi
}

# The SVG against plan.json: lifetimes over forward ++ backward (the losses live to the end), the
# first position of the largest live sum, its buffers; the timeline's bars; the highest buffer end.
svg_vs_plan() { # PLAN SVG -> "ok ..." or an error
  python3 - "$1" "$2" <<'EOF'
import json, sys, xml.etree.ElementTree as E
p = json.load(open(sys.argv[1]))
act = {b["name"]: b for b in p["buffers"] if b["kind"] == "act"}
sched = p["forward"] + p["backward"]
life = {}
for i, o in enumerate(sched, 1):
    for n in o["ins"] + o["outs"]:
        if n in act:
            f, l = life.get(n, (i, i))
            life[n] = (min(f, i), max(l, i))
life["losses"] = (life["losses"][0], len(sched) + 1)
live = [sum(4 * act[n]["numel"] for n, (f, l) in life.items() if f <= i <= l) for i in range(len(sched) + 2)]
peak = max(live); at = live.index(peak)
want = {n for n, (f, l) in life.items() if f <= at <= l}
ns = {"s": "http://www.w3.org/2000/svg"}
root = E.parse(sys.argv[2]).getroot()
g = [x for x in root.findall("s:g", ns) if x.get("id") == "peak"][0]
got = {r.get("data-buf"): float(r.get("data-bytes")) for r in g.findall("s:rect", ns)}
bars = [x for x in root.findall("s:g", ns) if x.get("id") == "timeline"][0].findall("s:rect", ns)
assert peak == p["act_bytes_peak_live"], f"peak here {peak} != plan {p['act_bytes_peak_live']}"
assert int(g.get("data-peak-bytes")) == peak and int(g.get("data-peak-op")) == at, (g.attrib, peak, at)
assert set(got) == want, f"peak list differs: {sorted(set(got) ^ want)}"
assert sum(got.values()) == peak, (sum(got.values()), peak)
assert len(bars) - 1 == len(life), (len(bars), len(life))   # + the panel's background
top = max(b["offset"] + b["bytes"] for n, b in act.items() if n in life)
print(f"ok peak {peak} B at op {at}: {len(want)} buffers; {len(life)} bars; highest buffer ends at {top}")
EOF
}

expect train_memprof 0 "memory profile: $TMP/m.svg — activation arena planned" -- "$TMP/t/train" "${C[@]}" --memory-profile "$TMP/m.svg" --metrics "$TMP/m1.jsonl"
OUT=$("$TMP/t/train" "${C[@]}" --memory-profile "$TMP/m.svg" --metrics "$TMP/m1.jsonl" 2>&1)
"$TMP/t/train" "${C[@]}" --metrics "$TMP/m0.jsonl" >/dev/null 2>&1
echo "$OUT" | grep -A2 "^memory profile"
check test_v2185_svg_well_formed wellformed "$TMP/m.svg"
R=$(svg_vs_plan "$TMP/t/plan.json" "$TMP/m.svg" 2>&1); echo "$R"
check test_v2185_peak_buffer_list_matches_the_plan test "${R%% *}" = ok
TOP=$(echo "$R" | awk '{ print $NF }')
check test_v2185_measured_arena_high_water_is_the_highest_buffer_end bash -c "echo '$OUT' | grep -q 'measured arena high-water $TOP B'"
check test_v2185_sentinel_leaves_losses_bit_identical test "$(losses "$TMP/m1.jsonl")" = "$(losses "$TMP/m0.jsonl")"
rss_ok() { # the printed "+G MiB measured vs P MiB planned": P <= G <= 1.05 P + 12
  echo "$1" | grep -o "+ [0-9.]* MiB measured vs [0-9.]* MiB planned" | awk '{ g = $2; p = $6; print "grown " g " planned " p > "/dev/stderr"; exit !(g >= p && g <= 1.05 * p + 12) }'
}
check test_v2185_peak_rss_vs_planned_within_margin rss_ok "$OUT"

# recompute (v2101) replays forward ops inside backward: the same checks hold on its schedule
OUTR=$("$TMP/r/train" "${C[@]}" --steps 2 --memory-profile "$TMP/r.svg" 2>&1)
check test_v2185_recompute_svg_well_formed wellformed "$TMP/r.svg"
R=$(svg_vs_plan "$TMP/r/plan.json" "$TMP/r.svg" 2>&1); echo "$R"
check test_v2185_recompute_peak_list_matches_the_plan test "${R%% *}" = ok
TOP=$(echo "$R" | awk '{ print $NF }')
check test_v2185_recompute_high_water bash -c "echo '$OUTR' | grep -q 'measured arena high-water $TOP B'"

# the plan's default (v2185): OUT/memory.svg; none writes nothing; a bad path exits 2 first
expect train_default 0 "memory profile: $TMP/p/memory.svg" -- "$TMP/p/train" "${C[@]}"
check test_v2185_default_svg_well_formed wellformed "$TMP/p/memory.svg"
rm -f "$TMP/p/memory.svg"
expect train_none 0 "done: 4 steps" -- "$TMP/p/train" "${C[@]}" --memory-profile none
check test_v2185_none_writes_nothing test ! -e "$TMP/p/memory.svg"
expect bad_dir 2 "train: --memory-profile '$TMP/no/m.svg': the directory '$TMP/no' does not exist" -- "$TMP/t/train" "${C[@]}" --memory-profile "$TMP/no/m.svg"
expect bad_is_dir 2 "is a directory — give a file name" -- "$TMP/t/train" "${C[@]}" --memory-profile "$TMP"

# sim: the same SVG; the arena is device memory (not scanned); RSS holds the sim device's memory
expect gen_sim 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL --model tiny --target sim --batch 2 --seq 16 -o "$TMP/s"
OUTS=$("$TMP/s/train" --data "$TMP/data" --steps 2 --eval-every 0 --sample 0 --memory-profile "$TMP/s.svg" 2>&1)
echo "$OUTS" | grep -A2 "^memory profile"
check test_v2185_sim_svg_well_formed wellformed "$TMP/s.svg"
R=$(svg_vs_plan "$TMP/s/plan.json" "$TMP/s.svg" 2>&1); echo "$R"
check test_v2185_sim_peak_list_matches_the_plan test "${R%% *}" = ok
check test_v2185_sim_says_arena_not_scanned bash -c "echo '$OUTS' | grep -q 'arena high-water: not measured on sim'"
check test_v2185_sim_peak_rss_vs_planned_within_margin rss_ok "$OUTS"
finish
