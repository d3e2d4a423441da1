/* test_tboard_v2183.c — v2183 TensorBoard event files (runtime/obs/tboard.c): CRC-32C against the
 * standard test vectors (RFC 3720 B.4 and "123456789"); our encoding of the fixture's events is
 * byte-identical to what TensorBoard's own writer wrote for the same inputs
 * (tests/reference/tb_v2183.json, made offline by tests/reference/make_tb_fixture.py), and our CRC
 * verifies TensorBoard's records; a file written with hyp_tboard_open/scalars parses back
 * (framing, CRCs, file_version first, SessionLog START on resume, scalars, NaN skipped).
 * `test_tboard_v2183 --dump FILE` prints a file's scalars (the trainer-level shell test uses it). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"
#include "tboard.h"

#include "hyp_test.h"

static int unhex(const char *s, uint8_t *out, size_t cap) {
    size_t n = strlen(s) / 2;
    if (n > cap) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    return (int)n;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- a tiny Event reader: what the test needs of the protobuf ---- */
typedef struct {
    double wall;
    int64_t step;
    char fv[32];
    int start, n;
    char tag[16][64];
    float val[16];
} ev_t;

static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

static int parse_event(const uint8_t *p, size_t n, ev_t *ev) {
    memset(ev, 0, sizeof *ev);
    size_t i = 0;
    while (i < n) {
        uint64_t key, L;
        if (varint(p, n, &i, &key)) return -1;
        int f = (int)(key >> 3), wt = (int)(key & 7);
        if ((wt == 1 && i + 8 > n) || (wt == 5 && i + 4 > n)) return -1;
        if (wt == 1) {
            uint64_t u = le(p + i, 8);
            if (f == 1) memcpy(&ev->wall, &u, 8);
            i += 8;
        } else if (wt == 0) {
            uint64_t v;
            if (varint(p, n, &i, &v)) return -1;
            if (f == 2) ev->step = (int64_t)v;
        } else if (wt == 2) {
            if (varint(p, n, &i, &L) || i + L > n) return -1;
            const uint8_t *q = p + i;
            if (f == 3 && L < sizeof ev->fv) memcpy(ev->fv, q, L);
            if (f == 7) ev->start = L == 2 && q[0] == 0x08 && q[1] == 1;
            if (f == 5) { /* Summary: repeated Value{tag=1, simple_value=2} */
                size_t j = 0;
                while (j < L && ev->n < 16) {
                    uint64_t k2, vl;
                    if (varint(q, L, &j, &k2) || varint(q, L, &j, &vl) || (k2 >> 3) != 1 || j + vl > L) return -1;
                    size_t k = 0, end = j + vl;
                    while (k < vl) {
                        uint64_t k3, tl;
                        const uint8_t *r = q + j;
                        if (varint(r, vl, &k, &k3)) return -1;
                        if (k3 == 0x0a) {
                            if (varint(r, vl, &k, &tl) || tl >= 64 || k + tl > vl) return -1;
                            memcpy(ev->tag[ev->n], r + k, tl);
                            k += tl;
                        } else if (k3 == 0x15 && k + 4 <= vl) {
                            uint32_t u = (uint32_t)le(r + k, 4);
                            memcpy(&ev->val[ev->n], &u, 4);
                            k += 4;
                        } else return -1;
                    }
                    ev->n++;
                    j = end;
                }
            }
            i += L;
        } else if (wt == 5) i += 4;
        else return -1;
    }
    return i == n ? 0 : -1;
}

/* Splits a TFRecord stream; verifies both CRCs of each record. Returns the count, -1 on a bad one. */
static int read_records(const uint8_t *b, size_t n, ev_t *evs, int max) {
    int k = 0;
    size_t i = 0;
    while (i < n && k < max) {
        if (i + 12 > n) return -1;
        uint64_t L = le(b + i, 8);
        if ((uint32_t)le(b + i + 8, 4) != hyp_crc32c_mask(hyp_crc32c(0, b + i, 8))) return -1;
        if (i + 16 + L > n) return -1;
        if ((uint32_t)le(b + i + 12 + L, 4) != hyp_crc32c_mask(hyp_crc32c(0, b + i + 12, L))) return -1;
        if (parse_event(b + i + 12, L, &evs[k])) return -1;
        k++;
        i += 16 + L;
    }
    return k;
}

/* --dump FILE: one line "step tag value" per scalar (and "step START" for a SessionLog START),
 * for tests/gen/test_tensorboard_v2183.sh; exit 1 on a bad record. */
static int dump(const char *path) {
    char *raw = NULL;
    size_t n = 0;
    hyp_err e = {{0}};
    if (hyp_fs_read_small(path, 1 << 28, &raw, &n, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    static ev_t evs[4096];
    int k = read_records((const uint8_t *)raw, n, evs, 4096);
    free(raw);
    if (k < 1 || strcmp(evs[0].fv, "brain.Event:2")) {
        fprintf(stderr, "%s: bad record (CRC or protobuf), or no file_version first\n", path);
        return 1;
    }
    for (int i = 1; i < k; i++) {
        if (evs[i].start) printf("%lld START\n", (long long)evs[i].step);
        for (int j = 0; j < evs[i].n; j++) printf("%lld %s %.9g\n", (long long)evs[i].step, evs[i].tag[j], evs[i].val[j]);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    /* CRC-32C vectors: RFC 3720 B.4 (iSCSI) and the usual check value */
    uint8_t z[32], o[32], up[32], down[32];
    for (int i = 0; i < 32; i++) z[i] = 0, o[i] = 0xff, up[i] = (uint8_t)i, down[i] = (uint8_t)(31 - i);
    CHECK(hyp_crc32c(0, "123456789", 9) == 0xe3069283u, "crc32c(\"123456789\") = e3069283 (got %08x)",
          hyp_crc32c(0, "123456789", 9));
    CHECK(hyp_crc32c(0, z, 32) == 0x8a9136aau, "crc32c(32 x 00) = 8a9136aa (RFC 3720)");
    CHECK(hyp_crc32c(0, o, 32) == 0x62a8ab43u, "crc32c(32 x ff) = 62a8ab43 (RFC 3720)");
    CHECK(hyp_crc32c(0, up, 32) == 0x46dd794eu, "crc32c(00..1f) = 46dd794e (RFC 3720)");
    CHECK(hyp_crc32c(0, down, 32) == 0x113fdb5cu, "crc32c(1f..00) = 113fdb5c (RFC 3720)");
    CHECK(hyp_crc32c(0, "", 0) == 0, "crc32c of nothing is 0");
    CHECK(hyp_crc32c(hyp_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u, "crc32c continues across calls");

    /* the fixture: TensorBoard's writer's bytes for the same inputs */
    char *txt = NULL;
    size_t tn = 0;
    hyp_err e = {{0}};
    int rc = hyp_fs_read_small(HYP_SOURCE_DIR "/tests/reference/tb_v2183.json", 1 << 20, &txt, &tn, &e);
    CHECK(rc == HYP_OK, "reads tests/reference/tb_v2183.json (%s)", e.msg);
    cJSON *fx = rc == HYP_OK ? cJSON_Parse(txt) : NULL;
    free(txt);
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(fx, "records");
    CHECK(cJSON_GetArraySize(recs) == 5, "the fixture holds 5 records");
    int idx = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, recs) {
        static uint8_t want[4096], data[4096], rec[4096 + 16];
        int wn = unhex(cJSON_GetObjectItemCaseSensitive(r, "hex")->valuestring, want, sizeof want);
        ev_t ev;
        int ok = wn > 16 && read_records(want, (size_t)wn, &ev, 1) == 1;
        CHECK(ok, "record %d: our CRC-32C verifies TensorBoard's framing and our reader parses it", idx);
        if (idx == 0) {
            CHECK(ok && !strcmp(ev.fv, "brain.Event:2"), "TensorBoard's first record is file_version brain.Event:2");
            idx++;
            continue; /* it also names its writer (source_metadata): no inputs of ours to compare */
        }
        hyp_metric_kv kv[16];
        int n = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(r, "scalars")) {
            kv[n].key = cJSON_GetArrayItem(s, 0)->valuestring;
            kv[n].value = cJSON_GetArrayItem(s, 1)->valuedouble;
            n++;
        }
        size_t dn = hyp_tboard_encode_event(data, sizeof data,
                                            cJSON_GetObjectItemCaseSensitive(r, "wall_time")->valuedouble,
                                            (int64_t)cJSON_GetObjectItemCaseSensitive(r, "step")->valuedouble, NULL,
                                            kv, n, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "session_start")));
        size_t rn = hyp_tboard_frame(rec, sizeof rec, data, dn);
        CHECK(dn > 0 && rn == (size_t)wn && !memcmp(rec, want, rn),
              "record %d (step %d, %d scalars): our bytes equal TensorBoard's writer's (%zu vs %d bytes)", idx,
              (int)cJSON_GetObjectItemCaseSensitive(r, "step")->valuedouble, n, rn, wn);
        idx++;
    }
    cJSON_Delete(fx);

    /* a file of ours parses back: file_version first, scalars, START on resume, NaN skipped */
    char dir[64] = "/tmp/hyp_test_tboard_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char sub[128];
    snprintf(sub, sizeof sub, "%s/run/tb", dir);
    hyp_tboard *t = NULL;
    rc = hyp_tboard_open(&t, sub, 1, &e);
    CHECK(rc == HYP_OK && t, "opens an event file in a new directory (%s)", e.msg);
    if (!t) return 1;
    CHECK(strstr(hyp_tboard_path(t), "/events.out.tfevents.") != NULL, "named events.out.tfevents.* (%s)",
          hyp_tboard_path(t));
    for (uint64_t s = 11; s <= 13; s++) {
        hyp_metric_kv kv[3] = {{"train/loss", 4.0 / (double)s}, {"train/lr", 6e-4}, {"val/loss", s == 13 ? 2.5 : NAN}};
        rc = hyp_tboard_scalars(t, s, kv, 3, &e);
    }
    CHECK(rc == HYP_OK, "writes three steps");
    char path[4096];
    snprintf(path, sizeof path, "%s", hyp_tboard_path(t));
    /* flushed at each call: readable before close */
    char *raw = NULL;
    size_t rn = 0;
    rc = hyp_fs_read_small(path, 1 << 20, &raw, &rn, &e);
    static ev_t evs[16];
    int k = rc == HYP_OK ? read_records((const uint8_t *)raw, rn, evs, 16) : -1;
    CHECK(k == 5, "5 records before close (file_version, START, 3 steps), CRCs valid (got %d)", k);
    if (k == 5) {
        CHECK(!strcmp(evs[0].fv, "brain.Event:2") && evs[0].wall > 1.6e9, "first: file_version brain.Event:2, wall time now");
        CHECK(evs[1].start && evs[1].step == 11, "a resumed run's first step writes SessionLog START at it");
        CHECK(evs[2].step == 11 && evs[2].n == 2 && !strcmp(evs[2].tag[0], "train/loss") &&
              evs[2].val[0] == (float)(4.0 / 11), "step 11: train/loss = 4/11 as float32, NaN val/loss skipped");
        CHECK(evs[4].step == 13 && evs[4].n == 3 && !strcmp(evs[4].tag[2], "val/loss") && evs[4].val[2] == 2.5f,
              "step 13: val/loss 2.5");
    }
    free(raw);
    hyp_tboard_close(t);
    hyp_metric_kv bad = {"", 1.0};
    rc = hyp_tboard_open(&t, sub, 0, &e);
    CHECK(rc == HYP_OK && hyp_tboard_scalars(t, 1, &bad, 1, &e) == HYP_EINPUT, "an empty tag is refused");
    hyp_tboard_close(t);
    rm_rf(dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
