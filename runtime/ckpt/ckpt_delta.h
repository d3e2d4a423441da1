/* ckpt_delta.h — v2180 incremental checkpoints: a step directory whose model and optimizer files
 * are stored as the XOR of their bytes with a full checkpoint's (the base), compressed with zstd.
 * Bits that did not change XOR to zero bytes and compress to almost nothing; the saving depends
 * on how much of each float changed between the two saves (sign, exponent and the high mantissa
 * bits of slowly moving weights stay equal).
 *
 * Layout: DIR/step_N/model.safetensors.zdelta (and optimizer.safetensors.zdelta): "HYPXDLT1",
 * u64 little-endian length of the full file, u64 length of the base's, then one zstd frame of
 * the full file's bytes XOR the base's (past the base's end: the bytes themselves), as byte
 * planes (all first bytes of the 4-byte words, then all second, ...; the n % 4 tail last), which
 * groups the zero sign/exponent bytes into long runs. state.json
 * keeps its "files" (size + xxh3-128 of the FULL files, so a restore is verified exactly like a
 * full checkpoint) and gains "delta": {"base": "step_M", "files": {NAME.zdelta: {bytes, xxh3_128}}}.
 * train_state.safetensors (small) stays as it is. The base is always a full checkpoint: no
 * chains. Sharded checkpoints (v2181) are never turned into deltas.
 *
 * Crash safety: a conversion writes the .zdelta files (atomic), then state.json (atomic), then
 * removes the full files; at any point the step directory is a complete checkpoint, full or delta.
 * Pruning (hyp_ckpt_prune) never deletes a base that a kept delta needs.
 * Never: a delta whose base is itself a delta; writing into the base. */
#ifndef HYP_CKPT_DELTA_H
#define HYP_CKPT_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "hyp_err.h"

typedef struct {
    uint64_t full_bytes;   /* the full files' bytes that the deltas replace */
    uint64_t delta_bytes;  /* the .zdelta files' bytes */
} hyp_ckpt_delta_stats;

/* Turns DIR/step (a complete full checkpoint) into a delta against DIR/base (a full one).
 * level: zstd level (1..19). stats may be NULL. */
int hyp_ckpt_delta_make(const char *dir, const char *step, const char *base, int level, hyp_ckpt_delta_stats *stats,
                        hyp_err *e);
/* hyp_ckpt_save_aux, then (delta_base not NULL or "") the new step turned into a delta against
 * DIR/delta_base, then the pruning to `keep` (after the conversion, so the base is protected). */
int hyp_ckpt_save_inc(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states, int n_states,
                      int n, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st, int keep,
                      const char *delta_base, hyp_ckpt_delta_stats *stats, hyp_err *e);
/* The base a step directory's delta refers to, into base[cap]; "" for a full checkpoint (or an
 * unreadable state.json). */
void hyp_ckpt_delta_base(const char *step_dir, char *base, size_t cap);
/* For the loader: when step_dir is a delta, rebuilds its full files (verified against the
 * recorded .zdelta checksums; the loader verifies the result against "files") in a new temp
 * directory next to it, whose path goes into out[cap]; out = "" for a full checkpoint. A missing
 * or damaged base or delta is HYP_EINPUT. */
int hyp_ckpt_delta_restore(const char *step_dir, char *out, size_t cap, hyp_err *e);
/* Removes a directory hyp_ckpt_delta_restore made. */
void hyp_ckpt_delta_cleanup(const char *restored);

#endif
