/* ckpt.h — training checkpoints: save and bit-exact resume of weights, optimizer state, RNG and
 * data loader position, crash-safe on disk.
 *
 * Layout of a checkpoint directory DIR:
 *   DIR/step_00000123/model.safetensors      fp32 weights under the caller's (Hugging Face-style)
 *                                            names; metadata {"format": "pt", ...} so
 *                                            transformers/safetensors load it directly
 *   DIR/step_00000123/optimizer.safetensors  the optimizer's state tensors, named by the optimizer
 *                                            (AdamW: "<name>.exp_avg", "<name>.exp_avg_sq"; absent
 *                                            for weights-only checkpoints)
 *   DIR/step_00000123/train_state.safetensors  auxiliary training state (the FP8 scaling states:
 *                                            amax histories, scales, positions), when given
 *   DIR/step_00000123/state.json             format version, step, RNG state, loader state,
 *                                            config_hash, size + xxh3-128 of each .safetensors
 *   DIR/latest                               "step_00000123\n": the newest complete checkpoint
 *
 * Crash safety: a save builds DIR/.tmp-step_00000123-XXXXXX, fsyncs every file and the directory,
 * renames it to DIR/step_00000123 (atomically swapping out an older checkpoint of the same step,
 * if any), fsyncs DIR, and only then replaces DIR/latest (temp + rename + fsync). A process killed
 * at any point leaves `latest` naming a complete checkpoint; leftover .tmp-step_* directories are
 * deleted by the next save. One writer per DIR (in data-parallel runs, rank 0 saves).
 *
 * Load verifies before it writes anything into the caller's buffers: the format version, the
 * config_hash, each file's size and xxh3-128, the safetensors structure, and that the names,
 * dtypes (F32) and shapes are exactly the ones the caller expects (no missing, no extra). So on
 * any error the caller's weights are untouched.
 */
#ifndef HYP_CKPT_H
#define HYP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

#define HYP_CKPT_MAX_DIMS 4
#define HYP_CKPT_HASH_MAX 128
#define HYP_CKPT_PLAN_MAX 256
#define HYP_CKPT_PATH_MAX 4096
#define HYP_CKPT_FORMAT_VERSION 1
#define HYP_CKPT_MAX_STATES 4          /* optimizer state tensors per parameter */
#define HYP_CKPT_STREAM_RANKS 256      /* v2129: data-parallel ranks whose stream position fits */
#define HYP_CKPT_STREAM_FIELDS 6       /*   numbers per rank (HYP_LOADER_STREAM_N of data.h) */

/* hyp_ckpt_load's answer when the directory holds no checkpoint yet (no DIR, or no DIR/latest):
 * a fresh run for `--resume`, an error for anything that needs weights. e->msg is filled too. */
#define HYP_ENOCKPT 3

/* One fp32 tensor: a parameter, or one of its optimizer states. */
typedef struct {
    const char *name;                   /* params: "transformer.h.0.attn.c_attn.weight"; states
                                           "<name><suffix>" with the optimizer's suffixes */
    float *data;                        /* [numel]; saved from / loaded into */
    int ndim;                           /* 1..4 */
    int64_t shape[HYP_CKPT_MAX_DIMS];
} hyp_ckpt_tensor;

/* Everything besides tensors that a bit-exact resume needs. */
typedef struct {
    uint64_t step;                       /* optimizer steps completed; names the directory */
    uint64_t tokens_seen;                /* optional bookkeeping */
    uint64_t rng[4];                     /* hyp_rng_get_state() */
    uint64_t loader_epoch;               /* hyp_loader_get_state() of the train loader: */
    uint64_t loader_position;            /*   .epoch and .position */
    uint64_t world;                      /* data-parallel ranks that saved it (0: not recorded) */
    char config_hash[HYP_CKPT_HASH_MAX]; /* the plan's hash; load refuses a different one */
    char plan[HYP_CKPT_PLAN_MAX];        /* optional: which plan, for humans ("tiny+bf16 ...") */
    char tokenizer[16];                  /* optional (v2125): the training data's tokenizer kind */
    char tokenizer_hash[17];             /*   its file's xxh3_64 ("" for byte / not recorded) */
    char tokenizer_file[HYP_CKPT_PATH_MAX]; /* its file when saved (absolute), for `train sample` */
    char path[HYP_CKPT_PATH_MAX];        /* load fills it: the step directory loaded */
    int has_loss_scale;                  /* optional (v2162): the dynamic loss scaler's state */
    double loss_scale;                   /*   its scale */
    uint64_t loss_scale_good;            /*   clean steps since the scale last changed */
    int n_stream;                        /* optional (v2129 --stream): ranks whose stream position */
    uint64_t stream[HYP_CKPT_STREAM_RANKS][HYP_CKPT_STREAM_FIELDS]; /* is saved (0: none; old
                                            checkpoints); state.json "stream": one array per rank */
} hyp_ckpt_state;

/* Saves DIR/step_<st->step>/ (DIR is created if missing), points DIR/latest at it, then deletes
 * all but the `keep` most recently saved step directories (keep <= 0: keep all; the one `latest`
 * names is never deleted; recency rather than step number, so after resuming from an earlier
 * step the new run's checkpoints win over the abandoned run's). Saving a step that exists
 * replaces it. Pruning only deletes directories holding nothing but checkpoint files.
 * params[n] go to model.safetensors; states[k][n] for k < n_states (the optimizer's state
 * tensors, each the shape of its param) to optimizer.safetensors, interleaved per parameter —
 * n_states = 0 for a weights-only checkpoint. */
int hyp_ckpt_save(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states, int n_states,
                  int n, const hyp_ckpt_state *st, int keep, hyp_err *e);

/* An auxiliary tensor of training state (not a model tensor): F32 or I64 (HYP_ST_* of
 * safetensors.h), saved to train_state.safetensors. */
typedef struct {
    const char *name;
    int dtype;                          /* HYP_ST_F32 or HYP_ST_I64 */
    void *data;
    int ndim;
    int64_t shape[HYP_CKPT_MAX_DIMS];
} hyp_ckpt_aux;

/* hyp_ckpt_save plus aux[n_aux] (n_aux = 0: none, no train_state.safetensors). */
int hyp_ckpt_save_aux(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                      int n_states, int n, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st,
                      int keep, hyp_err *e);

/* Loads a checkpoint into the caller's buffers. step = NULL: the one DIR/latest names (or DIR
 * itself when DIR is a step directory, i.e. holds state.json); else a step directory name inside
 * DIR ("step_00000123"). Returns HYP_ENOCKPT when step is NULL and DIR has no checkpoint yet.
 * expect_config_hash: the running plan's hash; NULL skips the check (e.g. an export tool).
 * n_states = 0 loads weights only. Names, dtypes (F32) and shapes must match the files exactly
 * (no missing, no extra tensors). On success st (may be NULL) holds the saved state and the step
 * directory's path; on any error nothing the caller owns has changed. */
int hyp_ckpt_load(const char *dir, const char *step, hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                  int n_states, int n, const char *expect_config_hash, hyp_ckpt_state *st, hyp_err *e);

/* hyp_ckpt_load plus aux[n_aux]: with n_aux > 0 the checkpoint must hold exactly these auxiliary
 * tensors (names, dtypes, shapes), verified like the rest before anything is written. */
int hyp_ckpt_load_aux(const char *dir, const char *step, hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                      int n_states, int n, hyp_ckpt_aux *aux, int n_aux, const char *expect_config_hash,
                      hyp_ckpt_state *st, hyp_err *e);

/* ---- sharded checkpoints (v2181) ------------------------------------------------------------
 * With ZeRO stage >= 1 on several ranks each rank writes the slices it owns, no gathering:
 *   DIR/step_N/shard_RRRRR.safetensors   rank R's slices, 1-D F32: "<name>" and its states'
 *                                        names = elements [lo, hi) of the flattened tensor
 *   DIR/step_N/state.json                as above, plus "layout": {"world", "stage", "ranges":
 *                                        {"<name>": [lo_0, hi_0, lo_1, hi_1, ...] per rank}}
 *                                        and the size + xxh3-128 of every shard under "files"
 *   DIR/step_N/train_state.safetensors   the auxiliary tensors (rank 0)
 * Protocol (the caller runs the collectives): rank 0 hyp_ckpt_shard_begin -> a temp dir, which
 * it broadcasts; every rank hyp_ckpt_shard_write into it; the sums and ranges go to rank 0; if
 * every rank succeeded rank 0 hyp_ckpt_shard_commit (fsync, rename, latest), else
 * hyp_ckpt_shard_abort. A crash before the commit leaves only a temp dir, removed by the next save.
 * hyp_ckpt_load(_aux) reads both layouts: from shards it assembles the full tensors, whatever
 * world size saved them (the caller re-shards); a missing or corrupt shard is refused (HYP_EINPUT)
 * before anything is written. */
typedef struct {
    int64_t lo, hi;                     /* elements [lo, hi) of the flattened tensor; lo == hi: none */
    const float *p;                     /* their values, hi - lo each: the parameter's */
    const float *state[HYP_CKPT_MAX_STATES]; /* and its optimizer states' */
} hyp_ckpt_slice;

typedef struct {
    char hex[33];                       /* xxh3-128 of the shard file */
    uint64_t bytes;
} hyp_ckpt_shard_sum;

/* Rank 0: creates DIR and the temp dir of step st->step; its path into tmp[cap]. */
int hyp_ckpt_shard_begin(const char *dir, const hyp_ckpt_state *st, char *tmp, size_t cap, hyp_err *e);
/* Every rank: writes tmp/shard_<rank>.safetensors from sl[n] (names from params[n] and
 * states[k][n], k < n_states >= 1). */
int hyp_ckpt_shard_write(const char *tmp, int rank, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                         int n_states, int n, const hyp_ckpt_slice *sl, const hyp_ckpt_state *st,
                         hyp_ckpt_shard_sum *sum, hyp_err *e);
/* Rank 0, after every rank wrote: ranges[world][n][2] and sums[world] of all ranks; writes
 * aux[n_aux] and state.json, then installs the step and `latest` like hyp_ckpt_save. */
int hyp_ckpt_shard_commit(const char *dir, const char *tmp, const hyp_ckpt_tensor *params, int n, int world,
                          int stage, const int64_t *ranges, const hyp_ckpt_shard_sum *sums,
                          const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st, int keep, hyp_err *e);
/* Rank 0: removes the temp dir of a save that failed on some rank. */
void hyp_ckpt_shard_abort(const char *tmp);

/* Deletes all but the `keep` most recently saved step directories of DIR, as hyp_ckpt_save does
 * (never the one `latest` names, nor a full checkpoint that a kept v2180 delta is based on). */
void hyp_ckpt_prune(const char *dir, int keep);

/* The step directory DIR/latest names, as a path in out (cap bytes); out = "" (and HYP_OK) when
 * DIR has no checkpoint yet (no DIR or no DIR/latest). HYP_EINPUT when `latest` is malformed or
 * names a missing directory. */
int hyp_ckpt_latest(const char *dir, char *out, size_t cap, hyp_err *e);

#endif
