/* tboard.c — the TensorBoard event-file writer (TFRecord framing, CRC-32C, hand-encoded Event
 * protobufs); the format is described in tboard.h. */
#include "tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "fsio.h"

#define MAX_TAG 127
#define MAX_VALUES 64

struct hyp_tboard {
    char path[4096];
    int fd;
    int session_start_pending;
};

/* ---- CRC-32C ---- */

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1; /* idempotent: racing initializers write the same values */
}

uint32_t hyp_crc32c(uint32_t crc, const void *data, size_t n) {
    if (!crc_ready) crc_init();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t hyp_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf encoding ---- */

typedef struct {
    uint8_t *b;
    size_t n, cap;
    int over;
} pb;

static void put_bytes(pb *w, const void *s, size_t len) {
    if (w->over || w->n + len > w->cap) {
        w->over = 1;
        return;
    }
    memcpy(w->b + w->n, s, len);
    w->n += len;
}

static void put_varint(pb *w, uint64_t v) {
    uint8_t t[10];
    int k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    put_bytes(w, t, (size_t)k);
}

static void put_le(pb *w, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put_bytes(w, t, (size_t)bytes);
}

static void put_double(pb *w, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(w, u, 8);
}

static void put_float(pb *w, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(w, u, 4);
}

static int varint_len(uint64_t v) {
    int k = 1;
    while (v >>= 7) k++;
    return k;
}

size_t hyp_tboard_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                               const char *file_version, const hyp_metric_kv *kv, int n,
                               int session_start) {
    pb w = {buf, 0, cap, 0};
    put_varint(&w, (1 << 3) | 1); /* wall_time: fixed64 */
    put_double(&w, wall_time);
    if (step) {
        put_varint(&w, (2 << 3) | 0); /* step: varint */
        put_varint(&w, (uint64_t)step);
    }
    if (file_version) {
        size_t L = strlen(file_version);
        put_varint(&w, (3 << 3) | 2);
        put_varint(&w, L);
        put_bytes(&w, file_version, L);
    }
    if (n > 0) {
        /* Value = tag (1: 0x0a, len, bytes) + simple_value (2: 0x15, fixed32) */
        size_t sum_len = 0;
        for (int i = 0; i < n; i++) {
            if (!isfinite(kv[i].value)) continue;
            size_t tl = strlen(kv[i].key);
            if (tl == 0 || tl > MAX_TAG) return 0;
            size_t vl = 1 + 1 + tl + 1 + 4;
            sum_len += 1 + (size_t)varint_len(vl) + vl;
        }
        put_varint(&w, (5 << 3) | 2);
        put_varint(&w, sum_len);
        for (int i = 0; i < n; i++) {
            if (!isfinite(kv[i].value)) continue;
            size_t tl = strlen(kv[i].key);
            put_varint(&w, (1 << 3) | 2);
            put_varint(&w, 1 + 1 + tl + 1 + 4);
            put_varint(&w, (1 << 3) | 2);
            put_varint(&w, tl);
            put_bytes(&w, kv[i].key, tl);
            put_varint(&w, (2 << 3) | 5);
            put_float(&w, (float)kv[i].value);
        }
    }
    if (session_start) {
        put_varint(&w, (7 << 3) | 2); /* session_log (7; 6 is the deprecated log_message) { status: START } */
        put_varint(&w, 2);
        put_varint(&w, (1 << 3) | 0);
        put_varint(&w, 1);
    }
    return w.over ? 0 : w.n;
}

size_t hyp_tboard_frame(uint8_t *buf, size_t cap, const uint8_t *data, size_t n) {
    if (cap < n + 16) return 0;
    pb w = {buf, 0, cap, 0};
    put_le(&w, (uint64_t)n, 8);
    put_le(&w, hyp_crc32c_mask(hyp_crc32c(0, buf, 8)), 4);
    put_bytes(&w, data, n);
    put_le(&w, hyp_crc32c_mask(hyp_crc32c(0, data, n)), 4);
    return w.over ? 0 : w.n;
}

/* ---- the file ---- */

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

static int write_event(hyp_tboard *t, double wall, int64_t step, const char *fv, const hyp_metric_kv *kv,
                       int n, int start, hyp_err *e) {
    uint8_t data[MAX_VALUES * (MAX_TAG + 16) + 64], rec[sizeof data + 16];
    if (n > MAX_VALUES) return hyp_fail(e, HYP_EINPUT, "%s: %d scalars in one event (at most %d)", t->path, n, MAX_VALUES);
    size_t dn = hyp_tboard_encode_event(data, sizeof data, wall, step, fv, kv, n, start);
    if (!dn) return hyp_fail(e, HYP_EINPUT, "%s: a scalar tag is empty or longer than %d bytes", t->path, MAX_TAG);
    size_t rn = hyp_tboard_frame(rec, sizeof rec, data, dn);
    ssize_t w = write(t->fd, rec, rn);
    if (w != (ssize_t)rn) {
        int err = w < 0 ? errno : ENOSPC;
        return hyp_fail(e, HYP_EFAIL, "%s: cannot write a TensorBoard event: %s — check the disk", t->path, strerror(err));
    }
    return HYP_OK;
}

int hyp_tboard_open(hyp_tboard **out, const char *dir, int resumed, hyp_err *e) {
    *out = NULL;
    if (!dir || !dir[0]) return hyp_fail(e, HYP_EINPUT, "(tensorboard): no directory given");
    int rc = hyp_fs_mkdirs(dir, e);
    if (rc != HYP_OK) return rc;
    hyp_tboard *t = calloc(1, sizeof *t);
    if (!t) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", dir);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    t->fd = -1;
    for (int k = 0; k < 1000 && t->fd < 0; k++) {
        snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%010lld.%s.%d.%d", dir, (long long)time(NULL), host,
                 (int)getpid(), k);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (t->fd < 0 && errno != EEXIST) break;
    }
    if (t->fd < 0) {
        int err = errno;
        rc = hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create a TensorBoard event file: %s — check the directory is writable",
                      t->path, strerror(err));
        free(t);
        return rc;
    }
    if ((rc = write_event(t, wall_now(), 0, "brain.Event:2", NULL, 0, 0, e))) {
        hyp_tboard_close(t);
        return rc;
    }
    t->session_start_pending = resumed;
    *out = t;
    return HYP_OK;
}

const char *hyp_tboard_path(const hyp_tboard *t) { return t->path; }

int hyp_tboard_scalars(hyp_tboard *t, uint64_t step, const hyp_metric_kv *kv, int n, hyp_err *e) {
    double wall = wall_now();
    if (t->session_start_pending) {
        int rc = write_event(t, wall, (int64_t)step, NULL, NULL, 0, 1, e);
        if (rc) return rc;
        t->session_start_pending = 0;
    }
    return write_event(t, wall, (int64_t)step, NULL, kv, n, 0, e);
}

void hyp_tboard_close(hyp_tboard *t) {
    if (!t) return;
    if (t->fd >= 0) {
        fsync(t->fd);
        close(t->fd);
    }
    free(t);
}
