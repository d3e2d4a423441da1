/* metrics.c — the JSONL metrics writer; format and resume rule are described in metrics.h. */
#include "metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"

#define MAX_LOG_BYTES ((size_t)1 << 30) /* resume rewrites the log in memory */

struct hyp_metrics {
    char *path;
    int fd;
    int trim_pending; /* append mode over a non-empty log: trim at the first write */
    char *line;       /* reusable line buffer */
    size_t cap;
};

void hyp_metrics_fmt_number(double v, char *out, int cap) {
    if (!isfinite(v)) snprintf(out, (size_t)cap, "null");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0) snprintf(out, (size_t)cap, "%.0f", v);
    else snprintf(out, (size_t)cap, "%.9g", v);
}

/* Drops the lines of path whose "step" >= first_new_step (and any torn or unparsable line). */
static int trim_from(const char *path, uint64_t first_new_step, hyp_err *e) {
    char *txt = NULL;
    size_t n = 0;
    int rc = hyp_fs_read_small(path, MAX_LOG_BYTES, &txt, &n, e);
    if (rc != HYP_OK) return rc;
    char *out = malloc(n + 1);
    if (!out) {
        free(txt);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    }
    size_t k = 0;
    for (char *line = txt; line < txt + n;) {
        char *nl = memchr(line, '\n', (size_t)(txt + n - line));
        if (!nl) break; /* torn last line */
        *nl = '\0';
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        if (cJSON_IsNumber(s) && s->valuedouble < (double)first_new_step) {
            size_t L = (size_t)(nl - line);
            memcpy(out + k, line, L);
            out[k + L] = '\n';
            k += L + 1;
        }
        cJSON_Delete(j);
        line = nl + 1;
    }
    free(txt);
    rc = hyp_fs_write_atomic(path, out, k, e);
    free(out);
    return rc;
}

static int open_fd(const char *path, int truncate, int *fd, hyp_err *e) {
    *fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
    if (*fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open the metrics log: %s — check the "
                        "path is writable", path, strerror(err));
    }
    return HYP_OK;
}

int hyp_metrics_open(hyp_metrics **out, const char *path, int append, hyp_err *e) {
    *out = NULL;
    if (!path || !path[0]) return hyp_fail(e, HYP_EINPUT, "(metrics): no path given");
    char dir[4096];
    hyp_fs_dirname(path, dir, sizeof dir);
    int fd, rc = hyp_fs_mkdirs(dir, e);
    if (rc != HYP_OK) return rc;
    if ((rc = open_fd(path, !append, &fd, e)) != HYP_OK) return rc;
    hyp_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        close(fd);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    }
    struct stat st;
    m->fd = fd;
    m->trim_pending = append && fstat(fd, &st) == 0 && st.st_size > 0;
    *out = m;
    return HYP_OK;
}

/* ---- line building ---- */

typedef struct {
    hyp_metrics *m;
    size_t n;
    int oom;
} lb;

static void put(lb *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->n + len + 2 > b->m->cap) {
        size_t cap = b->m->cap ? b->m->cap : 512;
        while (cap < b->n + len + 2) cap *= 2;
        char *p = realloc(b->m->line, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->m->line = p;
        b->m->cap = cap;
    }
    memcpy(b->m->line + b->n, s, len);
    b->n += len;
}

static void put_key(lb *b, const char *key) {
    static const char hex[] = "0123456789abcdef";
    put(b, b->n > 1 ? ",\"" : "\"", b->n > 1 ? 2 : 1);
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            put(b, esc, 2);
        } else if (*p < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            put(b, esc, 6);
        } else {
            put(b, (const char *)p, 1);
        }
    }
    put(b, "\":", 2);
}

static void put_num(lb *b, const char *key, double v) {
    char num[64];
    put_key(b, key);
    hyp_metrics_fmt_number(v, num, sizeof num);
    put(b, num, strlen(num));
}

static int emit(hyp_metrics *m, lb *b, uint64_t step, hyp_err *e) {
    put(b, "}\n", 2);
    if (b->oom) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", m->path);
    if (m->trim_pending) { /* resumed: drop what the crashed run logged from this step on */
        int rc = trim_from(m->path, step, e), fd;
        if (rc != HYP_OK) return rc;
        if ((rc = open_fd(m->path, 0, &fd, e)) != HYP_OK) return rc; /* the file was replaced */
        close(m->fd);
        m->fd = fd;
        m->trim_pending = 0;
    }
    if (hyp_fs_write_all(m->fd, m->line, b->n) != 0) {
        int err = errno;
        return hyp_fail(e, HYP_EFAIL, "%s: write failed: %s — check free disk space", m->path,
                        strerror(err));
    }
    return HYP_OK;
}

static void put_step(lb *b, uint64_t step) {
    char num[32];
    put(b, "{", 1);
    put_key(b, "step");
    snprintf(num, sizeof num, "%" PRIu64, step);
    put(b, num, strlen(num));
}

static int check_keys(hyp_metrics *m, const hyp_metric_kv *kv, int n, hyp_err *e) {
    static const char *const FIXED[] = {"step", "loss", "lr", "grad_norm", "tokens_per_s",
                                        "val_loss"};
    for (int i = 0; i < n; i++) {
        if (!kv[i].key || !kv[i].key[0])
            return hyp_fail(e, HYP_EINPUT, "%s: metric %d has no key", m->path, i);
        for (size_t k = 0; k < sizeof FIXED / sizeof *FIXED; k++)
            if (!strcmp(kv[i].key, FIXED[k]))
                return hyp_fail(e, HYP_EINPUT, "%s: extra metric '%s' clashes with a fixed field",
                                m->path, kv[i].key);
    }
    return HYP_OK;
}

int hyp_metrics_write(hyp_metrics *m, const hyp_metrics_row *r, hyp_err *e) {
    int rc = check_keys(m, r->extra, r->n_extra, e);
    if (rc != HYP_OK) return rc;
    lb b = {m, 0, 0};
    put_step(&b, r->step);
    put_num(&b, "loss", r->loss);
    put_num(&b, "lr", r->lr);
    put_num(&b, "grad_norm", r->grad_norm);
    put_num(&b, "tokens_per_s", r->tokens_per_s);
    if (!isnan(r->val_loss)) put_num(&b, "val_loss", r->val_loss);
    for (int i = 0; i < r->n_extra; i++) put_num(&b, r->extra[i].key, r->extra[i].value);
    return emit(m, &b, r->step, e);
}

int hyp_metrics_write_kv(hyp_metrics *m, uint64_t step, const hyp_metric_kv *kv, int n,
                         hyp_err *e) {
    for (int i = 0; i < n; i++)
        if (!kv[i].key || !kv[i].key[0] || !strcmp(kv[i].key, "step"))
            return hyp_fail(e, HYP_EINPUT, "%s: metric %d has no key or is \"step\"", m->path, i);
    lb b = {m, 0, 0};
    put_step(&b, step);
    for (int i = 0; i < n; i++) put_num(&b, kv[i].key, kv[i].value);
    return emit(m, &b, step, e);
}

void hyp_metrics_close(hyp_metrics *m) {
    if (!m) return;
    (void)fsync(m->fd);
    close(m->fd);
    free(m->line);
    free(m->path);
    free(m);
}
