# optim_env.sh — the setting the optimizer and data-parallel shell tests share, sourced after
# lib.sh: mpirun allowed as root and on more ranks than cores, one OpenMP thread per process, $DIFF
# the st_diff tool, spec_data, mpi2 and refuse. It must never run a trainer itself.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
DIFF="$BUILD/tests/st_diff"

# spec_data: the spec files concatenated ($TMP/corpus.txt) made into a data directory, $TMP/data
spec_data() {
  kjv_corpus "$TMP/corpus.txt"
  "$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
}

# mpi2: $MPI, the launcher of a 2-rank run; exit 1 when mpirun is missing
mpi2() {
  command -v mpirun >/dev/null || { echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; }
  MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
}

# refuse NAME REGEX gen-args...: gen refuses the selection (exit 2, REGEX in its message) and writes nothing
refuse() { # refuse NAME REGEX gen-args...
  local name=$1 re=$2; shift 2
  expect "$name" 2 "$re" -- "$GEN" specs/v2500.yaml "$@" -o "$TMP/bad"
  check "${name}_writes_nothing" test ! -e "$TMP/bad"
}
