/* ckpt.c — crash-safe checkpoint save / verified load / keep-last-K; layout and guarantees are
 * described in ckpt.h. */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_delta.h"
#include "fsio.h"
#include "safetensors.h"

#define PATH_CAP 4352
#define STATE_MAX_BYTES (1u << 20)
#define U53 9007199254740992.0

static const char *const FILES[] = {"model.safetensors", "optimizer.safetensors",
                                     "train_state.safetensors", "state.json"};
enum { F_MODEL, F_OPTIM, F_AUX, F_STATE, N_FILES };

/* Entries a checkpoint directory may hold: its three files and hyp_st_write / hyp_fs temp
 * files of them ("model.safetensors.tmp-XXXXXX"). Pruning deletes nothing else. */
static int is_ckpt_file(const char *name) {
    int r = -1, end = 0; /* v2181 shard files: shard_RRRRR.safetensors */
    if (sscanf(name, "shard_%5d.safetensors%n", &r, &end) == 1 && end > 0 && r >= 0 &&
        (name[end] == '\0' || !strncmp(name + end, ".tmp-", 5)))
        return 1;
    for (int i = 0; i < N_FILES; i++) {
        size_t n = strlen(FILES[i]);
        if (strncmp(name, FILES[i], n)) continue;
        if (i < F_AUX && !strncmp(name + n, ".zdelta", 7)) n += 7; /* v2180 deltas (ckpt_delta.h) */
        if (name[n] == '\0' || !strncmp(name + n, ".tmp-", 5)) return 1;
    }
    return 0;
}

/* "step_<digits>" -> step; -1 if name is not that. */
static int64_t parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int pathf(char *out, const char *fmt, const char *a, const char *b) {
    int n = snprintf(out, PATH_CAP, fmt, a, b);
    return (n < 0 || n >= PATH_CAP) ? -1 : 0;
}

static void shape_str(int ndim, const int64_t *shape, char *out, size_t cap) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

/* Validates the caller's tensors: params[n] (required), states[k][n] for k < n_states (each the
 * same shape as its param), with data buffers if need_data. */
static int check_names(const char *where, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                       int n_states, int n, int need_data, hyp_err *e) {
    if (n < 1 || !params)
        return hyp_fail(e, HYP_EINPUT, "%s: no tensors given to the checkpoint", where);
    if (n_states < 0 || n_states > HYP_CKPT_MAX_STATES || (n_states && !states))
        return hyp_fail(e, HYP_EINPUT, "%s: %d optimizer states given, 0..%d can be saved", where, n_states,
                        HYP_CKPT_MAX_STATES);
    for (int k = 0; k < n_states; k++)
        if (!states[k])
            return hyp_fail(e, HYP_EINPUT, "%s: optimizer state %d of %d not given — give every state the optimizer keeps, or none",
                            where, k, n_states);
    const hyp_ckpt_tensor *sets[1 + HYP_CKPT_MAX_STATES] = {params};
    for (int k = 0; k < n_states; k++) sets[1 + k] = states[k];
    for (int s = 0; s < 1 + n_states; s++)
        for (int i = 0; i < n; i++) {
            const hyp_ckpt_tensor *t = &sets[s][i];
            if (!t->name || !t->name[0])
                return hyp_fail(e, HYP_EINPUT, "%s: tensor %d has no name", where, i);
            if (t->ndim < 1 || t->ndim > HYP_CKPT_MAX_DIMS || hyp_st_numel(t->ndim, t->shape) < 0)
                return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' has an invalid shape (ndim "
                                "%d)", where, t->name, t->ndim);
            if (need_data && !t->data)
                return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.200s' has no data buffer", where,
                                t->name);
            int same = t->ndim == params[i].ndim;
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == params[i].shape[d];
            /* or a packed state: 1-D, at most the parameter's floats (Adam-mini's per-block v), or
             * any count for a matrix (Shampoo's blocked factors: br^2 + bc^2 per block); the
             * caller checks the count against the plan's layout */
            if (!same && s > 0 && t->ndim == 1 &&
                (params[i].ndim >= 2 || t->shape[0] <= hyp_st_numel(params[i].ndim, params[i].shape)))
                same = 1;
            if (!same)
                return hyp_fail(e, HYP_EINPUT, "%s: optimizer tensor '%.200s' does not have the "
                                "shape of its parameter '%.200s' (nor is it a 1-D packed state: at most its "
                                "size for a vector, any size for a matrix)",
                                where, t->name, params[i].name);
        }
    return HYP_OK;
}

static int check_tensors(const char *where, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                         int n_states, int n, hyp_err *e) {
    return check_names(where, params, states, n_states, n, 1, e);
}

/* ========================================================================================== */
/* save                                                                                        */

/* Deletes leftover DIR/.tmp-step_* directories of crashed saves. */
static void clean_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[PATH_CAP];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, ".tmp-step_", 10) != 0 && strncmp(de->d_name, ".old-step_", 10))
            continue;
        if (pathf(p, "%s/%s", dir, de->d_name) == 0) (void)hyp_fs_remove_flat(p, is_ckpt_file);
    }
    closedir(d);
}

typedef struct {
    int64_t step;
    int64_t mtime_ns; /* of its state.json: when the save finished; 0 if none */
    char name[64];
} step_ent;

/* Most recently saved first; ties (and dirs without state.json) by step, highest first. */
static int cmp_recent(const void *a, const void *b) {
    const step_ent *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns) return x->mtime_ns < y->mtime_ns ? 1 : -1;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* Keeps the `keep` most recently saved step dirs and the one `latest_name` names; best effort.
 * Recency, not step number: after resuming from an earlier step, the new run's checkpoints are
 * the ones to keep, not the abandoned run's higher-numbered ones. */
static void prune(const char *dir, int keep, const char *latest_name) {
    if (keep <= 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    step_ent *v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t s = parse_step_name(de->d_name);
        if (s < 0 || strlen(de->d_name) >= sizeof v->name) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            step_ent *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) break;
            v = nv;
        }
        v[n].step = s;
        memcpy(v[n].name, de->d_name, strlen(de->d_name) + 1); /* length checked above */
        char sp[PATH_CAP];
        struct stat st;
        v[n].mtime_ns = 0;
        if (snprintf(sp, sizeof sp, "%s/%s/state.json", dir, de->d_name) < (int)sizeof sp &&
            stat(sp, &st) == 0)
            v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        n++;
    }
    closedir(d);
    if (v) qsort(v, (size_t)n, sizeof *v, cmp_recent);
    char p[PATH_CAP];
    /* v2180: the full bases of the kept incremental checkpoints stay too */
    char (*bases)[64] = calloc((size_t)(keep < n ? keep : n) + 1, sizeof *bases);
    for (int i = 0; bases && i < n; i++)
        if ((i < keep || !strcmp(v[i].name, latest_name)) && pathf(p, "%s/%s", dir, v[i].name) == 0)
            hyp_ckpt_delta_base(p, bases[i < keep ? i : keep], sizeof bases[0]);
    for (int i = keep; i < n; i++) {
        if (!strcmp(v[i].name, latest_name)) continue;
        int needed = 0;
        for (int k = 0; bases && k <= (keep < n ? keep : n); k++) needed |= !strcmp(bases[k], v[i].name);
        if (needed || !bases) continue;
        if (pathf(p, "%s/%s", dir, v[i].name) == 0) (void)hyp_fs_remove_flat(p, is_ckpt_file);
    }
    free(bases);
    free(v);
}

void hyp_ckpt_prune(const char *dir, int keep) {
    char latest[PATH_CAP], *slash;
    hyp_err e;
    if (hyp_ckpt_latest(dir, latest, sizeof latest, &e) != HYP_OK) return;
    slash = strrchr(latest, '/');
    prune(dir, keep, slash ? slash + 1 : latest);
}

static int file_size(const char *path, uint64_t *size) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    *size = (uint64_t)st.st_size;
    return 0;
}

static cJSON *u64_hex(uint64_t v) {
    char b[24];
    snprintf(b, sizeof b, "%016" PRIx64, v);
    return cJSON_CreateString(b);
}

/* state.json's common part: format, counters, RNG, loader; the caller adds "files" (and
 * "layout" for a sharded checkpoint). */
static cJSON *state_json(const hyp_ckpt_state *st) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "format", "hyperion-checkpoint");
    cJSON_AddNumberToObject(j, "format_version", HYP_CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(j, "step", (double)st->step);
    cJSON_AddNumberToObject(j, "tokens_seen", (double)st->tokens_seen);
    cJSON_AddStringToObject(j, "config_hash", st->config_hash);
    cJSON_AddStringToObject(j, "plan", st->plan);
    cJSON *rng = cJSON_AddArrayToObject(j, "rng_xoshiro256");
    for (int i = 0; i < 4 && rng; i++) cJSON_AddItemToArray(rng, u64_hex(st->rng[i]));
    cJSON *ld = cJSON_AddObjectToObject(j, "loader");
    if (ld) {
        cJSON_AddNumberToObject(ld, "epoch", (double)st->loader_epoch);
        cJSON_AddNumberToObject(ld, "position", (double)st->loader_position);
    }
    if (st->world) cJSON_AddNumberToObject(j, "world", (double)st->world);
    if (st->n_stream > 0) { /* v2129: each rank's stream position (exact below 2^53, checked) */
        cJSON *sa = cJSON_AddArrayToObject(j, "stream");
        for (int r = 0; sa && r < st->n_stream; r++) {
            cJSON *ra = cJSON_CreateArray();
            for (int k = 0; ra && k < HYP_CKPT_STREAM_FIELDS; k++) cJSON_AddItemToArray(ra, cJSON_CreateNumber((double)st->stream[r][k]));
            cJSON_AddItemToArray(sa, ra);
        }
    }
    if (st->has_loss_scale) { /* v2162: a power of two in practice, written exactly (%.17g) */
        cJSON *ls = cJSON_AddObjectToObject(j, "loss_scale");
        if (ls) {
            cJSON_AddNumberToObject(ls, "scale", st->loss_scale);
            cJSON_AddNumberToObject(ls, "good_steps", (double)st->loss_scale_good);
        }
    }
    if (st->tokenizer[0]) { /* v2125: resuming on data of another tokenizer is refused */
        cJSON *tk = cJSON_AddObjectToObject(j, "data_tokenizer");
        if (tk) {
            cJSON_AddStringToObject(tk, "kind", st->tokenizer);
            cJSON_AddStringToObject(tk, "xxh3_64", st->tokenizer_hash);
            cJSON_AddStringToObject(tk, "file", st->tokenizer_file);
        }
    }
    cJSON_AddNumberToObject(j, "saved_unix", (double)time(NULL));
    return j;
}

static void add_file(cJSON *files, const char *name, uint64_t bytes, const char *hex) {
    cJSON *f = cJSON_AddObjectToObject(files, name);
    if (!f) return;
    cJSON_AddNumberToObject(f, "bytes", (double)bytes);
    cJSON_AddStringToObject(f, "xxh3_128", hex);
}

/* Writes j (consumed) as tmpdir/state.json. */
static int write_json(const char *tmpdir, cJSON *j, hyp_err *e) {
    char *txt = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", tmpdir);
    size_t len = strlen(txt);
    char *buf = realloc(txt, len + 2);
    if (!buf) {
        free(txt);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", tmpdir);
    }
    buf[len] = '\n';
    buf[len + 1] = '\0';
    char p[PATH_CAP];
    if (pathf(p, "%s/%s", tmpdir, "state.json") != 0) {
        free(buf);
        return hyp_fail(e, HYP_EINPUT, "%s: path too long", tmpdir);
    }
    int rc = hyp_fs_write_atomic(p, buf, len + 1, e);
    free(buf);
    return rc;
}

/* Moves the finished tmp dir to final, replacing an existing checkpoint of the same step. */
static int install(const char *dir, const char *tmp, const char *final, const char *step_name,
                   hyp_err *e) {
    if (rename(tmp, final) == 0) return HYP_OK;
    int err = errno;
    if (err != ENOTEMPTY && err != EEXIST)
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot move the checkpoint into place: %s",
                        final, strerror(err));
    if (hyp_fs_exchange(tmp, final) == 0) { /* tmp now holds the old checkpoint */
        (void)hyp_fs_remove_flat(tmp, is_ckpt_file);
        return HYP_OK;
    }
    char old[PATH_CAP];
    int n = snprintf(old, sizeof old, "%s/.old-%s-XXXXXX", dir, step_name);
    if (n < 0 || n >= (int)sizeof old || !mkdtemp(old))
        return hyp_fail(e, HYP_EFAIL, "%s: cannot make room to replace it: %s", final,
                        strerror(errno));
    if (rename(final, old) != 0 || rename(tmp, final) != 0) {
        err = errno;
        if (!hyp_fs_exists(final)) (void)rename(old, final);
        rmdir(old);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot replace the existing checkpoint: %s",
                        final, strerror(err));
    }
    (void)hyp_fs_remove_flat(old, is_ckpt_file);
    return HYP_OK;
}

static int check_aux(const char *where, const hyp_ckpt_aux *aux, int n_aux, hyp_err *e) {
    for (int i = 0; i < n_aux; i++)
        if (!aux[i].name || !aux[i].name[0] || !aux[i].data || (aux[i].dtype != HYP_ST_F32 && aux[i].dtype != HYP_ST_I64) ||
            aux[i].ndim < 1 || aux[i].ndim > HYP_CKPT_MAX_DIMS || hyp_st_numel(aux[i].ndim, aux[i].shape) < 0)
            return hyp_fail(e, HYP_EINPUT, "%s: auxiliary tensor %d needs a name, data, dtype F32 or I64 and a valid shape", where, i);
    return HYP_OK;
}

static int check_state(const char *dir, const hyp_ckpt_state *st, hyp_err *e) {
    if (!st) return hyp_fail(e, HYP_EINPUT, "%s: no checkpoint state given", dir);
    if ((double)st->step >= U53 || (double)st->tokens_seen >= U53 ||
        (double)st->loader_epoch >= U53 || (double)st->loader_position >= U53)
        return hyp_fail(e, HYP_EINPUT, "%s: a counter in the checkpoint state is >= 2^53", dir);
    if (st->n_stream < 0 || st->n_stream > HYP_CKPT_STREAM_RANKS)
        return hyp_fail(e, HYP_EINPUT, "%s: %d stream positions (at most %d ranks)", dir, st->n_stream, HYP_CKPT_STREAM_RANKS);
    for (int r = 0; r < st->n_stream; r++)
        for (int k = 0; k < HYP_CKPT_STREAM_FIELDS; k++)
            if ((double)st->stream[r][k] >= U53) return hyp_fail(e, HYP_EINPUT, "%s: a stream position is >= 2^53", dir);
    if (!memchr(st->config_hash, '\0', sizeof st->config_hash) ||
        !memchr(st->plan, '\0', sizeof st->plan))
        return hyp_fail(e, HYP_EINPUT, "%s: config_hash or plan is not NUL-terminated", dir);
    return HYP_OK;
}

/* Creates DIR (if missing) and the temp dir DIR/.tmp-step_N-XXXXXX a save writes into. */
static int begin_tmp(const char *dir, uint64_t step, char *tmp, hyp_err *e) {
    int rc;
    if ((rc = hyp_fs_mkdirs(dir, e)) != HYP_OK) return rc;
    clean_stale_tmp(dir);
    int len = snprintf(tmp, PATH_CAP, "%s/.tmp-step_%08" PRIu64 "-XXXXXX", dir, step);
    if (len < 0 || len >= PATH_CAP - 64)
        return hyp_fail(e, HYP_EINPUT, "%s: path too long — use a shorter checkpoint dir", dir);
    if (!mkdtemp(tmp)) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create a directory here: %s — check "
                        "the checkpoint dir is writable", dir, strerror(err));
    }
    (void)chmod(tmp, 0755);
    return HYP_OK;
}

/* The filled temp dir becomes DIR/step_N (fsyncs, rename), then DIR/latest names it; prunes. */
static int finish(const char *dir, const char *tmp, uint64_t step, int keep, hyp_err *e) {
    char step_name[64], final[PATH_CAP], p[PATH_CAP];
    snprintf(step_name, sizeof step_name, "step_%08" PRIu64, step);
    if (pathf(final, "%s/%s", dir, step_name) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: path too long — use a shorter checkpoint dir", dir);
    if (hyp_fs_fsync_dir(tmp) != 0) return hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", tmp, strerror(errno));
    int rc = install(dir, tmp, final, step_name, e);
    if (rc != HYP_OK) return rc;
    if (hyp_fs_fsync_dir(dir) != 0) return -hyp_fail(e, HYP_EFAIL, "%s: fsync failed: %s", dir, strerror(errno));
    char latest_txt[80];
    int ln = snprintf(latest_txt, sizeof latest_txt, "%s\n", step_name);
    if (pathf(p, "%s/%s", dir, "latest") != 0) return -hyp_fail(e, HYP_EINPUT, "%s: path too long", dir);
    if ((rc = hyp_fs_write_atomic(p, latest_txt, (size_t)ln, e)) != HYP_OK) return -rc;
    prune(dir, keep, step_name);
    return HYP_OK;
}

/* Writes one safetensors file of the checkpoint into tmp; its size and checksum to bytes/hex. */
static int write_file(const char *tmp, const char *name, const hyp_st_tensor *sts, int k,
                      const hyp_ckpt_state *st, int model, char hex[33], uint64_t *bytes, hyp_err *e) {
    char step_s[32], p[PATH_CAP];
    snprintf(step_s, sizeof step_s, "%" PRIu64, st->step);
    /* only the model file says "format": "pt" (loadable by transformers) */
    const hyp_st_meta meta[] = {{"format", "pt"}, {"producer", "hyperion"},
                                {"step", step_s}, {"config_hash", st->config_hash}};
    if (pathf(p, "%s/%s", tmp, name) != 0) return hyp_fail(e, HYP_EINPUT, "%s: path too long", tmp);
    int rc = hyp_st_write(p, sts, k, meta + (model ? 0 : 1), model ? 4 : 3, hex, e);
    if (rc != HYP_OK) return rc;
    if (file_size(p, bytes) != 0) return hyp_fail(e, HYP_EFAIL, "%s: cannot stat: %s", p, strerror(errno));
    return HYP_OK;
}

static int write_aux(const char *tmp, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st,
                     char hex[33], uint64_t *bytes, hyp_err *e) {
    hyp_st_tensor *sts = calloc((size_t)n_aux, sizeof *sts);
    if (!sts) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", tmp);
    for (int i = 0; i < n_aux; i++) {
        sts[i] = (hyp_st_tensor){.name = aux[i].name, .dtype = (hyp_st_dtype)aux[i].dtype, .ndim = aux[i].ndim,
                                 .data = aux[i].data};
        memcpy(sts[i].shape, aux[i].shape, sizeof aux[i].shape);
    }
    int rc = write_file(tmp, FILES[F_AUX], sts, n_aux, st, 0, hex, bytes, e);
    free(sts);
    return rc;
}

int hyp_ckpt_save(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states, int n_states,
                  int n, const hyp_ckpt_state *st, int keep, hyp_err *e) {
    return hyp_ckpt_save_aux(dir, params, states, n_states, n, NULL, 0, st, keep, e);
}

int hyp_ckpt_save_aux(const char *dir, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                      int n_states, int n, const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st,
                      int keep, hyp_err *e) {
    if (!dir || !dir[0]) return hyp_fail(e, HYP_EINPUT, "(checkpoint): no directory given");
    int rc, with_opt = n_states > 0;
    if ((rc = check_aux(dir, aux, n_aux, e)) || (rc = check_tensors(dir, params, states, n_states, n, e)) ||
        (rc = check_state(dir, st, e)))
        return rc;
    char tmp[PATH_CAP];
    if ((rc = begin_tmp(dir, st->step, tmp, e)) != HYP_OK) return rc;
    hyp_st_tensor *sts = calloc((size_t)n * (size_t)(n_states > 1 ? n_states : 1), sizeof *sts);
    char hex[F_STATE][33] = {{0}};
    uint64_t bytes[F_STATE] = {0};
    int have[F_STATE] = {1, with_opt, n_aux > 0};
    if (!sts) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
        goto fail;
    }
    for (int f = F_MODEL; f <= F_OPTIM && have[f]; f++) {
        /* model.safetensors: params; optimizer.safetensors: the states, interleaved per param */
        int k = 0;
        for (int i = 0; i < n; i++)
            for (int s = 0; s < (f == F_MODEL ? 1 : n_states); s++, k++) {
                const hyp_ckpt_tensor *src = f == F_MODEL ? &params[i] : &states[s][i];
                sts[k] = (hyp_st_tensor){.name = src->name, .dtype = HYP_ST_F32, .ndim = src->ndim,
                                         .data = src->data};
                memcpy(sts[k].shape, src->shape, sizeof src->shape);
            }
        if ((rc = write_file(tmp, FILES[f], sts, k, st, f == F_MODEL, hex[f], &bytes[f], e)) != HYP_OK) goto fail;
    }
    if (n_aux && (rc = write_aux(tmp, aux, n_aux, st, hex[F_AUX], &bytes[F_AUX], e)) != HYP_OK) goto fail;
    cJSON *j = state_json(st), *files = j ? cJSON_AddObjectToObject(j, "files") : NULL;
    for (int f = 0; f < F_STATE && files; f++)
        if (have[f]) add_file(files, FILES[f], bytes[f], hex[f]);
    if ((rc = write_json(tmp, j, e)) != HYP_OK) goto fail;
    rc = finish(dir, tmp, st->step, keep, e);
    if (rc <= 0) { /* installed (a failure after the rename comes back negated) */
        free(sts);
        return -rc;
    }
fail:
    (void)hyp_fs_remove_flat(tmp, is_ckpt_file);
    free(sts);
    return rc;
}

static void shard_name(char *out, size_t cap, int rank) { snprintf(out, cap, "shard_%05d.safetensors", rank); }

int hyp_ckpt_shard_begin(const char *dir, const hyp_ckpt_state *st, char *tmp, size_t cap, hyp_err *e) {
    if (!dir || !dir[0]) return hyp_fail(e, HYP_EINPUT, "(checkpoint): no directory given");
    int rc = check_state(dir, st, e);
    char t[PATH_CAP];
    if (rc || (rc = begin_tmp(dir, st->step, t, e))) return rc;
    if (strlen(t) >= cap) {
        hyp_ckpt_shard_abort(t);
        return hyp_fail(e, HYP_EINPUT, "%s: path too long — use a shorter checkpoint dir", dir);
    }
    memcpy(tmp, t, strlen(t) + 1);
    return HYP_OK;
}

int hyp_ckpt_shard_write(const char *tmp, int rank, const hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                         int n_states, int n, const hyp_ckpt_slice *sl, const hyp_ckpt_state *st,
                         hyp_ckpt_shard_sum *sum, hyp_err *e) {
    int rc = check_names(tmp, params, states, n_states, n, 0, e);
    if (rc) return rc;
    if (n_states < 1) return hyp_fail(e, HYP_EINPUT, "%s: a sharded checkpoint needs the optimizer states", tmp);
    int S = 1 + n_states;
    hyp_st_tensor *sts = calloc((size_t)n * (size_t)S + 1, sizeof *sts);
    if (!sts) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", tmp);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = hyp_st_numel(params[i].ndim, params[i].shape);
        if (sl[i].lo < 0 || sl[i].hi < sl[i].lo || sl[i].hi > numel) {
            free(sts);
            return hyp_fail(e, HYP_EINPUT, "%s: slice [%lld, %lld) of '%.200s' is outside its %lld elements", tmp,
                            (long long)sl[i].lo, (long long)sl[i].hi, params[i].name, (long long)numel);
        }
        if (sl[i].hi == sl[i].lo) continue;
        for (int s = 0; s < S; s++, k++)
            sts[k] = (hyp_st_tensor){.name = s ? states[s - 1][i].name : params[i].name, .dtype = HYP_ST_F32,
                                     .ndim = 1, .shape = {sl[i].hi - sl[i].lo}, .data = s ? sl[i].state[s - 1] : sl[i].p};
    }
    char name[64];
    shard_name(name, sizeof name, rank);
    rc = write_file(tmp, name, sts, k, st, 0, sum->hex, &sum->bytes, e);
    free(sts);
    return rc;
}

int hyp_ckpt_shard_commit(const char *dir, const char *tmp, const hyp_ckpt_tensor *params, int n, int world,
                          int stage, const int64_t *ranges, const hyp_ckpt_shard_sum *sums,
                          const hyp_ckpt_aux *aux, int n_aux, const hyp_ckpt_state *st, int keep, hyp_err *e) {
    int rc;
    char hex[33];
    uint64_t bytes = 0;
    if ((rc = check_aux(dir, aux, n_aux, e)) || (n_aux && (rc = write_aux(tmp, aux, n_aux, st, hex, &bytes, e))))
        goto fail;
    cJSON *j = state_json(st), *files = j ? cJSON_AddObjectToObject(j, "files") : NULL;
    cJSON *lay = j ? cJSON_AddObjectToObject(j, "layout") : NULL, *rg = lay ? cJSON_AddObjectToObject(lay, "ranges") : NULL;
    if (n_aux && files) add_file(files, FILES[F_AUX], bytes, hex);
    for (int r = 0; r < world && files; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        add_file(files, name, sums[r].bytes, sums[r].hex);
    }
    if (lay) {
        cJSON_AddNumberToObject(lay, "world", world);
        cJSON_AddNumberToObject(lay, "stage", stage);
    }
    for (int i = 0; i < n && rg; i++) {
        cJSON *a = cJSON_AddArrayToObject(rg, params[i].name);
        for (int r = 0; r < world && a; r++)
            for (int s = 0; s < 2; s++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)ranges[((size_t)r * n + i) * 2 + s]));
    }
    if (!rg) {
        cJSON_Delete(j);
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", tmp);
        goto fail;
    }
    if ((rc = write_json(tmp, j, e)) != HYP_OK) goto fail;
    rc = finish(dir, tmp, st->step, keep, e);
    if (rc <= 0) return -rc;
fail:
    hyp_ckpt_shard_abort(tmp);
    return rc;
}

void hyp_ckpt_shard_abort(const char *tmp) { (void)hyp_fs_remove_flat(tmp, is_ckpt_file); }

int hyp_ckpt_latest(const char *dir, char *out, size_t cap, hyp_err *e) {
    if (cap) out[0] = '\0';
    char p[PATH_CAP];
    if (pathf(p, "%s/%s", dir, "latest") != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: path too long", dir);
    if (!hyp_fs_exists(p)) return HYP_OK; /* no checkpoint yet */
    char *txt = NULL;
    size_t n = 0;
    int rc = hyp_fs_read_small(p, 256, &txt, &n, e);
    if (rc != HYP_OK) return rc;
    while (n > 0 && (txt[n - 1] == '\n' || txt[n - 1] == '\r' || txt[n - 1] == ' ')) txt[--n] = 0;
    if (parse_step_name(txt) < 0) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: does not name a step directory (\"%.60s\") — write the "
                      "name of a checkpoint, e.g. step_00000123, or delete it", p, txt);
        free(txt);
        return rc;
    }
    char sd[PATH_CAP];
    if (pathf(sd, "%s/%s", dir, txt) != 0) {
        free(txt);
        return hyp_fail(e, HYP_EINPUT, "%s: path too long", dir);
    }
    if (!hyp_fs_is_dir(sd)) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: names %s, which does not exist — restore it, or "
                      "delete %s to start fresh", p, txt, p);
        free(txt);
        return rc;
    }
    free(txt);
    if (strlen(sd) + 1 > cap) return hyp_fail(e, HYP_EINPUT, "%s: path too long", sd);
    memcpy(out, sd, strlen(sd) + 1);
    return HYP_OK;
}

static int json_u64(const cJSON *j, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble >= U53 ||
        floor(v->valuedouble) != v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* Checks one file's size and xxh3-128 against state.json, then opens it as safetensors. */
static int open_verified(const char *sd, const char *fname, const cJSON *files, hyp_st_file **f,
                         hyp_err *e) {
    char p[PATH_CAP];
    *f = NULL;
    if (pathf(p, "%s/%s", sd, fname) != 0) return hyp_fail(e, HYP_EINPUT, "%s: path too long", sd);
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(files, fname);
    const cJSON *hx = cJSON_GetObjectItemCaseSensitive(rec, "xxh3_128");
    uint64_t want_bytes;
    if (!cJSON_IsObject(rec) || !cJSON_IsString(hx) || json_u64(rec, "bytes", &want_bytes) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s/state.json: no size/checksum recorded for %s — the "
                        "checkpoint is damaged; resume from an earlier one", sd, fname);
    uint64_t have;
    if (file_size(p, &have) != 0) {
        int err = errno;
        return hyp_fail(e, HYP_EINPUT, "%s: %s — the checkpoint is incomplete; delete it or "
                        "resume from an earlier one", p, strerror(err));
    }
    if (have != want_bytes)
        return hyp_fail(e, HYP_EINPUT, "%s: file is %" PRIu64 " bytes but state.json recorded "
                        "%" PRIu64 " — the file is truncated or was replaced; delete this "
                        "checkpoint or resume from an earlier one", p, have, want_bytes);
    /* checksum the raw bytes first, so any corruption reads as corruption, not as a parse error */
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s", p, strerror(err));
    }
    XXH128_hash_t h = XXH3_128bits(NULL, 0);
    if (have > 0) {
        void *m = mmap(NULL, (size_t)have, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int err = errno;
            close(fd);
            return hyp_fail(e, HYP_EFAIL, "%s: mmap failed: %s", p, strerror(err));
        }
        h = XXH3_128bits(m, (size_t)have);
        munmap(m, (size_t)have);
    }
    close(fd);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    char hex[33];
    hyp_fs_hex(c.digest, 16, hex);
    if (strcmp(hex, hx->valuestring) != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: checksum mismatch — the file is corrupt; delete this "
                        "checkpoint or resume from an earlier one", p);
    return hyp_st_open(p, f, e);
}

/* Every expected tensor present with dtype F32 and the expected shape, and nothing else;
 * found[k] receives the file's tensor for ts[k]. */
static int match_tensors(const hyp_st_file *f, const hyp_ckpt_tensor *const *ts, int count,
                         const hyp_st_tensor **found, hyp_err *e) {
    for (int k = 0; k < count; k++) {
        const hyp_ckpt_tensor *t = ts[k];
        const hyp_st_tensor *s = hyp_st_find(f, t->name);
        if (!s)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.300s' is missing — the checkpoint is "
                            "from a different model; resume with the matching plan",
                            hyp_st_path(f), t->name);
        if (s->dtype != HYP_ST_F32)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.300s' is %s, expected F32 — the "
                            "checkpoint was not written by this trainer", hyp_st_path(f),
                            t->name, hyp_st_dtype_name(s->dtype));
        int same = s->ndim == t->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) {
            char a[160], b[160];
            shape_str(t->ndim, t->shape, a, sizeof a);
            shape_str(s->ndim, s->shape, b, sizeof b);
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.300s' has shape %s in the checkpoint "
                            "but the model expects %s — the checkpoint is from a different model "
                            "config", hyp_st_path(f), t->name, b, a);
        }
        found[k] = s;
    }
    if (hyp_st_count(f) != count) {
        /* the file has a tensor the caller did not ask for (or asked for one twice): name it */
        for (int j = 0; j < hyp_st_count(f); j++) {
            const hyp_st_tensor *s = hyp_st_get(f, j);
            int used = 0;
            for (int k = 0; k < count && !used; k++) used = found[k] == s;
            if (!used)
                return hyp_fail(e, HYP_EINPUT, "%s: holds tensor '%.300s', which this model does "
                                "not have — the checkpoint is from a different model config",
                                hyp_st_path(f), s->name);
        }
        return hyp_fail(e, HYP_EINPUT, "%s: the same tensor name is requested twice",
                        hyp_st_path(f));
    }
    return HYP_OK;
}

/* Resolves (dir, step) to a step directory; HYP_ENOCKPT when dir has no checkpoint yet. */
static int resolve(const char *dir, const char *step, char *sd, hyp_err *e) {
    char p[PATH_CAP];
    if (step) {
        if (parse_step_name(step) < 0)
            return hyp_fail(e, HYP_EINPUT, "%s: '%.100s' is not a step directory name (like "
                            "step_00000123)", dir, step);
        if (pathf(sd, "%s/%s", dir, step) != 0)
            return hyp_fail(e, HYP_EINPUT, "%s: path too long", dir);
        if (!hyp_fs_is_dir(sd))
            return hyp_fail(e, HYP_EINPUT, "%s: no such checkpoint — list %s for the steps it "
                            "has", sd, dir);
        return HYP_OK;
    }
    if (pathf(p, "%s/%s", dir, "state.json") != 0)
        return hyp_fail(e, HYP_EINPUT, "%s: path too long", dir);
    if (hyp_fs_exists(p)) { /* dir is itself a step directory */
        snprintf(sd, PATH_CAP, "%s", dir);
        return HYP_OK;
    }
    int rc = hyp_ckpt_latest(dir, sd, PATH_CAP, e);
    if (rc != HYP_OK) return rc;
    if (!sd[0])
        return hyp_fail(e, HYP_ENOCKPT, "%s: no checkpoint yet (no %s/latest) — train with "
                        "--ckpt-dir %s first, or give the directory of an existing checkpoint",
                        dir, dir, dir);
    return HYP_OK;
}

/* A sharded checkpoint's files, verified, and where each rank's slice of each tensor lies. */
typedef struct {
    int world;
    hyp_st_file **f;                    /* [world] */
    int64_t *rg;                        /* [world][n][2] */
    int S;                              /* tensors per parameter: 1 + the optimizer states */
    const hyp_st_tensor **found;        /* [world][n][S]: the param's slice, its states' */
} shards;

static void shards_close(shards *sh) {
    for (int r = 0; sh->f && r < sh->world; r++) hyp_st_close(sh->f[r]);
    free(sh->f), free(sh->rg), free(sh->found);
    memset(sh, 0, sizeof *sh);
}

/* The layout's ranges of each tensor: 2·world integers that tile [0, numel) in rank order. */
static int shard_ranges(const char *p, const cJSON *ranges, const hyp_ckpt_tensor *params, int n, shards *sh,
                        hyp_err *e) {
    if (cJSON_GetArraySize(ranges) != n)
        return hyp_fail(e, HYP_EINPUT, "%s: the shard layout lists %d tensors, this model has %d — the checkpoint is from a different model config",
                        p, cJSON_GetArraySize(ranges), n);
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(ranges, params[i].name);
        int64_t numel = hyp_st_numel(params[i].ndim, params[i].shape), at = 0;
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 * sh->world)
            return hyp_fail(e, HYP_EINPUT, "%s: no shard ranges for tensor '%.300s' — the checkpoint is from a different model or damaged", p, params[i].name);
        for (int k = 0; k < 2 * sh->world; k++) {
            const cJSON *x = cJSON_GetArrayItem(a, k);
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > (double)numel || floor(x->valuedouble) != x->valuedouble)
                return hyp_fail(e, HYP_EINPUT, "%s: shard range %d of '%.300s' is not an element index — the checkpoint is damaged", p, k, params[i].name);
            sh->rg[(size_t)k / 2 * 2 * (size_t)n + 2 * (size_t)i + k % 2] = (int64_t)x->valuedouble;
        }
        for (int r = 0; r < sh->world; r++) {
            const int64_t *q = &sh->rg[((size_t)r * n + i) * 2];
            if (q[1] == q[0]) continue;
            if (q[0] != at || q[1] < q[0])
                return hyp_fail(e, HYP_EINPUT, "%s: the shard ranges of '%.300s' do not tile it — the checkpoint is damaged", p, params[i].name);
            at = q[1];
        }
        if (at != numel)
            return hyp_fail(e, HYP_EINPUT, "%s: the shards hold %lld of the %lld elements of '%.300s' — the checkpoint is damaged", p,
                            (long long)at, (long long)numel, params[i].name);
    }
    return HYP_OK;
}

/* Opens and verifies every shard: checksums, and each slice F32 1-D of its range's length. */
static int shards_open(const char *sd, const cJSON *files, const cJSON *lay, const hyp_ckpt_tensor *params,
                       hyp_ckpt_tensor *const *states, int n_states, int n, shards *sh, hyp_err *e) {
    char p[PATH_CAP];
    if (pathf(p, "%s/%s", sd, "state.json") != 0) return hyp_fail(e, HYP_EINPUT, "%s: path too long", sd);
    uint64_t world;
    if (json_u64(lay, "world", &world) != 0 || world < 1 || world > 65536)
        return hyp_fail(e, HYP_EINPUT, "%s: layout.world is not a rank count — the checkpoint is damaged", p);
    sh->world = (int)world;
    sh->f = calloc(world, sizeof *sh->f);
    sh->rg = calloc(world * (size_t)n * 2, sizeof *sh->rg);
    sh->S = 1 + n_states;
    sh->found = calloc(world * (size_t)n * (size_t)sh->S, sizeof *sh->found);
    if (!sh->f || !sh->rg || !sh->found) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
    int rc = shard_ranges(p, cJSON_GetObjectItemCaseSensitive(lay, "ranges"), params, n, sh, e);
    for (int r = 0; r < sh->world && !rc; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        if ((rc = open_verified(sd, name, files, &sh->f[r], e))) break;
        int count = 0;
        for (int i = 0; i < n && !rc; i++) {
            const int64_t *q = &sh->rg[((size_t)r * n + i) * 2];
            if (q[1] == q[0]) continue;
            for (int s = 0; s < sh->S && !rc; s++, count++) {
                const char *nm = s ? states[s - 1][i].name : params[i].name;
                const hyp_st_tensor *t = hyp_st_find(sh->f[r], nm);
                if (!t || t->dtype != HYP_ST_F32 || t->ndim != 1 || t->shape[0] != q[1] - q[0])
                    rc = hyp_fail(e, HYP_EINPUT, "%s/%s: slice '%.300s' is %s — the checkpoint is damaged or from a different model", sd, name,
                                  nm, t ? "not F32 of its range's length" : "missing");
                sh->found[((size_t)r * n + i) * sh->S + s] = t;
            }
        }
        if (!rc && n_states && hyp_st_count(sh->f[r]) != count) /* weights only: the states are not read */
            rc = hyp_fail(e, HYP_EINPUT, "%s/%s: holds %d tensors, the layout names %d — the checkpoint is damaged", sd, name,
                          hyp_st_count(sh->f[r]), count);
    }
    return rc;
}

static void shards_copy(const shards *sh, hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states, int n) {
    for (int r = 0; r < sh->world; r++)
        for (int i = 0; i < n; i++) {
            const int64_t *q = &sh->rg[((size_t)r * n + i) * 2];
            for (int s = 0; s < sh->S && q[1] > q[0]; s++) {
                hyp_ckpt_tensor *dst = s ? &states[s - 1][i] : &params[i];
                memcpy(dst->data + q[0], sh->found[((size_t)r * n + i) * sh->S + s]->data, sizeof(float) * (size_t)(q[1] - q[0]));
            }
        }
}

/* The auxiliary tensors: each present with its dtype and shape, nothing else in the file. */
static int match_aux(const hyp_st_file *f, const hyp_ckpt_aux *aux, int n_aux, const hyp_st_tensor **found,
                     hyp_err *e) {
    for (int i = 0; i < n_aux; i++) {
        const hyp_st_tensor *s = hyp_st_find(f, aux[i].name);
        int same = s && s->dtype == (hyp_st_dtype)aux[i].dtype && s->ndim == aux[i].ndim;
        for (int d = 0; same && d < s->ndim; d++) same = s->shape[d] == aux[i].shape[d];
        if (!same)
            return hyp_fail(e, HYP_EINPUT, "%s: tensor '%.300s' is %s — the checkpoint's training state is from a different plan; resume with the matching trainer",
                            hyp_st_path(f), aux[i].name, s ? "of another dtype or shape" : "missing");
        found[i] = s;
    }
    if (hyp_st_count(f) != n_aux)
        return hyp_fail(e, HYP_EINPUT, "%s: holds %d tensors, this trainer expects %d — the checkpoint's training state is from a different plan",
                        hyp_st_path(f), hyp_st_count(f), n_aux);
    return HYP_OK;
}

int hyp_ckpt_load(const char *dir, const char *step, hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                  int n_states, int n, const char *expect_config_hash, hyp_ckpt_state *st_out, hyp_err *e) {
    return hyp_ckpt_load_aux(dir, step, params, states, n_states, n, NULL, 0, expect_config_hash, st_out, e);
}

int hyp_ckpt_load_aux(const char *dir, const char *step, hyp_ckpt_tensor *params, hyp_ckpt_tensor *const *states,
                      int n_states, int n, hyp_ckpt_aux *aux, int n_aux, const char *expect_config_hash,
                      hyp_ckpt_state *st_out, hyp_err *e) {
    if (!dir || !dir[0]) return hyp_fail(e, HYP_EINPUT, "(checkpoint): no directory given");
    if (check_aux(dir, aux, n_aux, e)) return HYP_EINPUT;
    int with_opt = n_states > 0, S = 1 + n_states, rc = check_tensors(dir, params, states, n_states, n, e);
    if (rc != HYP_OK) return rc;
    char sd[PATH_CAP], p[PATH_CAP], orig[PATH_CAP], restored[PATH_CAP] = "";
    if ((rc = resolve(dir, step, sd, e)) != HYP_OK) return rc;
    memcpy(orig, sd, sizeof orig);
    /* v2180: an incremental checkpoint's full files, rebuilt next to it and verified below */
    if ((rc = hyp_ckpt_delta_restore(orig, restored, sizeof restored, e)) != HYP_OK) return rc;
    if (restored[0]) memcpy(sd, restored, sizeof sd); /* both PATH_CAP */
    if (pathf(p, "%s/%s", sd, "state.json") != 0) {
        hyp_ckpt_delta_cleanup(restored);
        return hyp_fail(e, HYP_EINPUT, "%s: path too long", sd);
    }
    char *txt = NULL;
    if ((rc = hyp_fs_read_small(p, STATE_MAX_BYTES, &txt, NULL, e)) != HYP_OK) {
        hyp_ckpt_delta_cleanup(restored);
        return rc;
    }
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    hyp_st_file *fm = NULL, *fo = NULL, *fa = NULL;
    shards sh = {0};
    const cJSON *lay = NULL;
    const hyp_st_tensor **found = NULL;
    const hyp_ckpt_tensor **want = NULL;
    hyp_ckpt_state *st = calloc(1, sizeof *st); /* ~4.5 KB: not on the stack */
    if (!st) {
        cJSON_Delete(j);
        hyp_ckpt_delta_cleanup(restored);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
    }
    if (!j || !cJSON_IsObject(j)) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: not valid JSON — the checkpoint is damaged; resume "
                      "from an earlier one", p);
        goto done;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    uint64_t ver;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hyperion-checkpoint") != 0 ||
        json_u64(j, "format_version", &ver) != 0) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: not a Hyperion checkpoint state file", p);
        goto done;
    }
    if (ver != HYP_CKPT_FORMAT_VERSION) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: checkpoint format version %" PRIu64 ", this trainer "
                      "reads version %d — use the Hyperion version that wrote it", p, ver,
                      HYP_CKPT_FORMAT_VERSION);
        goto done;
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "config_hash");
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(j, "plan");
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(j, "rng_xoshiro256");
    const cJSON *ld = cJSON_GetObjectItemCaseSensitive(j, "loader");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    if (!cJSON_IsString(ch) || strlen(ch->valuestring) >= HYP_CKPT_HASH_MAX ||
        json_u64(j, "step", &st->step) != 0 || json_u64(j, "tokens_seen", &st->tokens_seen) != 0 ||
        cJSON_GetArraySize(rng) != 4 || json_u64(ld, "epoch", &st->loader_epoch) != 0 ||
        json_u64(ld, "position", &st->loader_position) != 0 || !cJSON_IsObject(files)) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: a required field is missing or malformed — the "
                      "checkpoint is damaged; resume from an earlier one", p);
        goto done;
    }
    snprintf(st->config_hash, sizeof st->config_hash, "%s", ch->valuestring);
    st->world = 0; /* optional: checkpoints that do not record it resume at any world size */
    if (cJSON_GetObjectItemCaseSensitive(j, "world") && json_u64(j, "world", &st->world) != 0) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: field 'world' is malformed — the checkpoint is damaged; resume from an earlier one", p);
        goto done;
    }
    if (cJSON_IsString(pl)) snprintf(st->plan, sizeof st->plan, "%s", pl->valuestring);
    st->n_stream = 0; /* optional (v2129): absent in shard runs and older checkpoints */
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "stream");
    if (sa) {
        int ok = cJSON_IsArray(sa) && cJSON_GetArraySize(sa) <= HYP_CKPT_STREAM_RANKS;
        for (int r = 0; ok && r < cJSON_GetArraySize(sa); r++) {
            const cJSON *ra = cJSON_GetArrayItem(sa, r);
            ok = cJSON_IsArray(ra) && cJSON_GetArraySize(ra) == HYP_CKPT_STREAM_FIELDS;
            for (int k = 0; ok && k < HYP_CKPT_STREAM_FIELDS; k++) {
                const cJSON *v = cJSON_GetArrayItem(ra, k);
                ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < U53 && floor(v->valuedouble) == v->valuedouble;
                if (ok) st->stream[r][k] = (uint64_t)v->valuedouble;
            }
        }
        if (!ok) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: field 'stream' is malformed — the checkpoint is damaged; resume from an earlier one", p);
            goto done;
        }
        st->n_stream = cJSON_GetArraySize(sa);
    }
    st->has_loss_scale = 0;
    const cJSON *lsj = cJSON_GetObjectItemCaseSensitive(j, "loss_scale"); /* optional (v2162) */
    if (lsj) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(lsj, "scale");
        if (!cJSON_IsNumber(sc) || !(sc->valuedouble > 0) || !isfinite(sc->valuedouble) ||
            json_u64(lsj, "good_steps", &st->loss_scale_good) != 0) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: field 'loss_scale' is malformed — the checkpoint is damaged; resume from an earlier one", p);
            goto done;
        }
        st->has_loss_scale = 1;
        st->loss_scale = sc->valuedouble;
    }
    st->tokenizer[0] = st->tokenizer_hash[0] = st->tokenizer_file[0] = '\0';
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(j, "data_tokenizer"); /* optional */
    if (tk) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(tk, "kind");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(tk, "xxh3_64");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(tk, "file");
        if (!cJSON_IsString(k) || !cJSON_IsString(h) || strlen(k->valuestring) >= sizeof st->tokenizer ||
            strlen(h->valuestring) >= sizeof st->tokenizer_hash) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: field 'data_tokenizer' is malformed — the checkpoint is damaged; resume from an earlier one", p);
            goto done;
        }
        snprintf(st->tokenizer, sizeof st->tokenizer, "%s", k->valuestring);
        snprintf(st->tokenizer_hash, sizeof st->tokenizer_hash, "%s", h->valuestring);
        if (cJSON_IsString(f)) snprintf(st->tokenizer_file, sizeof st->tokenizer_file, "%s", f->valuestring);
    }
    if (strlen(orig) >= sizeof st->path) {
        rc = hyp_fail(e, HYP_EINPUT, "%.200s...: path too long", orig);
        goto done;
    }
    memcpy(st->path, orig, strlen(orig) + 1);
    for (int i = 0; i < 4; i++) {
        const cJSON *w = cJSON_GetArrayItem(rng, i);
        char *endp = NULL;
        if (!cJSON_IsString(w) || strlen(w->valuestring) != 16 ||
            (st->rng[i] = strtoull(w->valuestring, &endp, 16), *endp != '\0')) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: rng_xoshiro256 word %d is not 16 hex digits — the "
                          "checkpoint is damaged", p, i);
            goto done;
        }
    }
    if (expect_config_hash && strcmp(expect_config_hash, st->config_hash) != 0) {
        rc = hyp_fail(e, HYP_EINPUT, "%s: written by plan %s%s%s%s, but this trainer runs plan "
                      "%s — resume with the trainer generated from that plan, or use another "
                      "checkpoint dir to start fresh", sd, st->config_hash[0] ? st->config_hash
                      : "(no hash)", st->plan[0] ? " (" : "", st->plan, st->plan[0] ? ")" : "",
                      expect_config_hash);
        goto done;
    }
    found = calloc((size_t)n * (size_t)S + (size_t)n_aux, sizeof *found);
    want = calloc((size_t)n * (size_t)S, sizeof *want);
    if (!found || !want) {
        rc = hyp_fail(e, HYP_EFAIL, "%s: out of memory", sd);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        want[i] = &params[i];
        for (int k = 0; k < n_states; k++) want[n + n_states * i + k] = &states[k][i];
    }
    lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    if (lay && (rc = shards_open(sd, files, lay, params, states, n_states, n, &sh, e)) != HYP_OK) goto done;
    if (!lay && (rc = open_verified(sd, FILES[0], files, &fm, e)) != HYP_OK) goto done;
    if (!lay && (rc = match_tensors(fm, want, n, found, e)) != HYP_OK) goto done;
    if (with_opt && !lay) {
        if (!cJSON_GetObjectItemCaseSensitive(files, FILES[1])) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: has no optimizer state (weights only) — it cannot "
                          "resume training; load it as initial weights instead", sd);
            goto done;
        }
        if ((rc = open_verified(sd, FILES[1], files, &fo, e)) != HYP_OK) goto done;
        if ((rc = match_tensors(fo, want + n, n_states * n, found + n, e)) != HYP_OK) goto done;
    }
    if (n_aux) {
        if (!cJSON_GetObjectItemCaseSensitive(files, FILES[F_AUX])) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: has no %s (FP8 scaling state) — it was saved by a trainer without it; resume with that trainer or start fresh",
                          sd, FILES[F_AUX]);
            goto done;
        }
        if ((rc = open_verified(sd, FILES[F_AUX], files, &fa, e)) != HYP_OK) goto done;
        if ((rc = match_aux(fa, aux, n_aux, found + (size_t)S * n, e)) != HYP_OK) goto done;
    }
    /* everything verified: now, and only now, write into the caller's buffers */
    if (lay) shards_copy(&sh, params, states, n);
    for (int k = 0; k < (lay ? 0 : S * n); k++)
        memcpy(want[k]->data, found[k]->data, found[k]->nbytes);
    for (int i = 0; i < n_aux; i++) memcpy(aux[i].data, found[(size_t)S * n + i]->data, found[(size_t)S * n + i]->nbytes);
    if (st_out) *st_out = *st;
done:
    free(found);
    free(want);
    free(st);
    hyp_st_close(fm);
    hyp_st_close(fo);
    hyp_st_close(fa);
    shards_close(&sh);
    cJSON_Delete(j);
    hyp_ckpt_delta_cleanup(restored);
    return rc;
}
