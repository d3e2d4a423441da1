#!/usr/bin/env bash
# The device layer's collectives over MPI (issue #5): tests/unit/test_device --collectives under
# mpirun with 2 and 3 ranks. On each rank a kernel on a compute stream produces the data and the
# communication stream waits for its event, then all_reduce (sum, max), reduce_scatter, all_gather
# (separate buffers, and in place) and broadcast run through the "sim" device, i.e. runtime/coll.h.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
T="$BUILD/tests/test_device"
for np in 2 3; do
  last=$((np - 1))
  expect "device_collectives_np$np" 0 "rank $last/$np: [0-9]+ passed, 0 failed" -- mpirun -np $np --oversubscribe "$T" --collectives
  out=$(mpirun -np $np --oversubscribe "$T" --collectives 2>&1)
  check "device_collectives_np${np}_every_rank_passed" test "$(printf '%s\n' "$out" | grep -cE "^rank [0-9]+/$np: [1-9][0-9]* passed, 0 failed")" -eq $np
done
finish
