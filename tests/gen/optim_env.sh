# optim_env.sh — the setting the optimizer shell tests share, sourced after lib.sh: mpirun allowed
# as root and on more ranks than cores, one OpenMP thread per process, $DIFF the st_diff tool, and
# spec_data. It must never run a trainer itself.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
DIFF="$BUILD/tests/st_diff"

# spec_data: the spec files concatenated ($TMP/corpus.txt) made into a data directory, $TMP/data
spec_data() {
  kjv_corpus "$TMP/corpus.txt"
  "$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
}
