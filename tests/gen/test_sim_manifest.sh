#!/usr/bin/env bash
# A sim trainer whose kernels/kernels.json is damaged (by hand, or by a generator of another
# version) stops before its first step with one line naming the manifest, the kernel and what to
# do, exit status 2, and records no step in its metrics (runtime/exec_dev.c's manifest checks). Also --batch and
# --seq beyond what the trainer was planned for. Each case edits the manifest of one trainer in
# place, so the simulator compiles its kernels once (~15 s on a 2-core box), then the cases run in
# well under a second each. The trainer lives in BUILD/tests/sim_manifest (not the temp dir), so
# scripts/coverage.sh can read its kernels' sources after the test.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
head -c 20000 "$ROOT/specs/SCHEMA.md" > "$TMP/c.txt"
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
S="$BUILD/tests/sim_manifest"
rm -rf "$S"
expect gen_sim 0 "rendered for sim" -- "$GEN" specs/v2500.yaml --enable adamw,clip --model tiny --target sim --batch 2 --seq 16 -o "$S"
M="$S/kernels/kernels.json"
cp "$M" "$TMP/kernels.json.orig"
expect intact_manifest_trains_and_evaluates 0 "step +1/1 \| loss [0-9.]+ .*\| val [0-9.]+" -- "$S/train" --data "$TMP/data" --steps 1 --eval-every 1 --eval-batches 1

# damaged NAME REGEX PYTHON — applies PYTHON to the manifest (as m), runs one step, expects exit 2
damaged() {
  local name=$1 regex=$2 edit=$3
  cp "$TMP/kernels.json.orig" "$M"
  python3 -c "import json, sys
m = json.load(open(sys.argv[1]))
$edit
json.dump(m, open(sys.argv[1], 'w'))" "$M"
  rm -f "$TMP/m.jsonl"
  expect "$name" 2 "$regex" -- "$S/train" --data "$TMP/data" --steps 1 --eval-every 0 --metrics "$TMP/m.jsonl"
  check "${name}_no_step_recorded" bash -c "! grep -qs '\"loss\"' '$TMP/m.jsonl'"
}
damaged wrong_format "kernels.json: not a hyperion kernel manifest — regenerate with gen" "m['format'] = 'other'"
damaged file_without_name "kernels.json: a file entry has no name" "del m['files'][0]['file']"
damaged undeclared_kernel "launches no_such_kernel of residual.cu, which the manifest does not declare" \
  "m['ops']['accumulate'][0]['kernel'] = 'no_such_kernel'"
damaged launch_without_args "op 'accumulate': a launch lacks kernel/file/args" "del m['ops']['accumulate'][0]['args']"
damaged argument_count "accumulate takes 3 arguments, the launch binds 2" "m['ops']['accumulate'][0]['args'].pop()"
damaged op_without_launch "plan op 'accumulate' has no kernel launch" "del m['ops']['accumulate']"
damaged kernel_without_grid "kernels.json: accumulate has no block/grid" \
  "[k.pop('grid') for f in m['files'] for k in f['kernels'] if k['name'] == 'accumulate']"
damaged unsupported_parameter "accumulate: parameter type 'double' is not supported" \
  "[k['params'][-1].update(type='double') for f in m['files'] for k in f['kernels'] if k['name'] == 'accumulate']"
damaged unknown_name_in_argument "cannot evaluate 'N\\*frobs': unknown name frobs" \
  "m['ops']['accumulate'][0]['args'][2] = 'N*frobs'"
damaged unknown_function_in_argument "unknown function sqrt" "m['ops']['accumulate'][0]['args'][2] = 'sqrt(N)'"
damaged no_optimizer_launch "has no f32 adamw_step optimizer launch" "del m['ops']['optimizer']"

cp "$TMP/kernels.json.orig" "$M"
echo '{"format": "hyperion-kernels", ' > "$M"
expect manifest_not_json 2 "kernels.json: not valid JSON — regenerate with gen" -- "$S/train" --data "$TMP/data" --steps 1 --eval-every 0
rm "$M"
expect manifest_missing 2 "kernels.json: cannot open — generate the trainer with gen --target sim" -- "$S/train" --data "$TMP/data" --steps 1 --eval-every 0
cp "$TMP/kernels.json.orig" "$M"
expect batch_beyond_plan 2 "--batch 4: this trainer was planned for batch <= 2" -- "$S/train" --data "$TMP/data" --steps 1 --batch 4
expect seq_beyond_plan 2 "--seq 32: this trainer was planned for sequences <= 16" -- "$S/train" --data "$TMP/data" --steps 1 --seq 32
finish
