/* pref_ref.h — the online reference model of the preference objectives (v2195 DPO, v2198 KTO with
 * reference: online): a frozen copy of the starting weights (the --init-from checkpoint or the
 * initialization) in its own cpu executor over the policy's plan, run forward only, in the same
 * step as the policy, on the same rows. Its log-probabilities are what the precomputed pass would
 * have stored: the copy never changes.
 * Its weights go once, when a run starts, to CKPT_DIR/reference_model.bin (pref_ref_save) so that
 * a resumed run restores the frozen copy (pref_ref_load) instead of copying the resumed weights.
 * Never: gradients, an optimizer step, or a device backend (the preference trainer is cpu-only).
 */
#ifndef HYP_PREF_REF_H
#define HYP_PREF_REF_H

#include "exec.h"

typedef struct pref_ref pref_ref;

/* Copies x's plan shape and current parameters (the reference = these weights from now on) into
 * a forward-only executor bound to x's B x T (a full copy on every rank; under ZeRO-3 x's
 * parameter shards are all-gathered: then a collective). HYP_EFAIL when out of memory. */
int pref_ref_open(pref_ref **out, exec_t *x, hyp_err *e);
/* The frozen executor (fill its tokens/targets, run exec_eval_loss). */
exec_t *pref_ref_exec(pref_ref *r);
/* Bytes the copy holds (for the banner). */
double pref_ref_bytes(const pref_ref *r);
void pref_ref_close(pref_ref *r);

/* The frozen weights to path, crash-safe (temp file, fsync, rename): "HYPRFM01", the float count
 * and the xxh3-64 of the floats (uint64 each), then the fp32 weights. */
int pref_ref_save(const pref_ref *r, const char *path, hyp_err *e);
/* Replaces the copy's weights by the file's; HYP_EINPUT with a one-line reason when it is missing,
 * truncated, of another model size or fails its checksum (the copy is then unchanged). */
int pref_ref_load(pref_ref *r, const char *path, hyp_err *e);

#endif
