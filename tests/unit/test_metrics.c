/* test_metrics.c — the JSONL metrics log: one parseable object per line with the fixed fields,
 * extras, exact integers and %.9g floats, null for NaN/Inf; resume drops the steps after the
 * checkpoint (and a torn last line); bad keys are refused. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"

#include "hyp_test.h"

static int read_lines(const char *path, char lines[][512], int max) {
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < max && fgets(lines[n], 512, f)) n++;
    if (f) fclose(f);
    return n;
}

int main(void) {
    char dir[64] = "/tmp/hyp_test_metrics_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/run/metrics.jsonl", dir);
    hyp_err e = {{0}};
    hyp_metrics *m = NULL;
    int rc = hyp_metrics_open(&m, path, 0, &e);
    CHECK(rc == HYP_OK && m != NULL, "opens a new log, creating its directory (%s)", e.msg);
    if (!m) return 1;
    hyp_metric_kv extra[2] = {{"tokens_seen", 12345678901.0}, {"mfu \"pct\"", 0.4125}};
    for (uint64_t s = 1; s <= 5; s++) {
        hyp_metrics_row r = {.step = s, .loss = 4.0f / (float)s, .lr = 6e-4f, .grad_norm = 1.5,
                             .tokens_per_s = 51234.5, .val_loss = s == 5 ? 2.5 : NAN,
                             .extra = extra, .n_extra = 2};
        if (s == 3) r.loss = NAN;
        if (s == 4) r.grad_norm = INFINITY;
        hyp_metrics_write(m, &r, &e);
    }
    hyp_metrics_close(m);

    char lines[16][512];
    int n = read_lines(path, lines, 16);
    CHECK(n == 5, "5 rows -> 5 lines");
    cJSON *j = cJSON_Parse(lines[0]);
    CHECK(j && cJSON_GetObjectItem(j, "step")->valuedouble == 1 &&
              cJSON_GetObjectItem(j, "loss")->valuedouble == 4.0 &&
              (float)cJSON_GetObjectItem(j, "lr")->valuedouble == 6e-4f &&
              cJSON_GetObjectItem(j, "tokens_per_s")->valuedouble == 51234.5 &&
              !cJSON_GetObjectItem(j, "val_loss"),
          "line 1 parses: step, loss, lr (float round-trips), tokens_per_s; no val_loss");
    CHECK(strstr(lines[0], "\"tokens_seen\":12345678901") != NULL,
          "large integers print exactly (%.40s...)", strstr(lines[0], "\"tokens_seen\""));
    CHECK(j && cJSON_GetObjectItem(j, "mfu \"pct\"") &&
              cJSON_GetObjectItem(j, "mfu \"pct\"")->valuedouble == 0.4125,
          "extra keys are escaped and parse back");
    cJSON_Delete(j);
    j = cJSON_Parse(lines[2]);
    CHECK(j && cJSON_IsNull(cJSON_GetObjectItem(j, "loss")), "NaN loss is written as null");
    cJSON_Delete(j);
    j = cJSON_Parse(lines[3]);
    CHECK(j && cJSON_IsNull(cJSON_GetObjectItem(j, "grad_norm")), "Inf is written as null");
    cJSON_Delete(j);
    j = cJSON_Parse(lines[4]);
    CHECK(j && cJSON_GetObjectItem(j, "val_loss")->valuedouble == 2.5,
          "val_loss appears when it is not NaN");
    cJSON_Delete(j);
    char num[32];
    hyp_metrics_fmt_number(1.0 / 3.0, num, sizeof num);
    CHECK(!strcmp(num, "0.333333333"), "non-integers print with %%.9g (%s)", num);

    /* resume from a checkpoint at step 3: the crashed run had logged 4 and 5 and half of 6 */
    FILE *f = fopen(path, "a");
    fputs("{\"step\":6,\"loss\":1.", f);
    fclose(f);
    rc = hyp_metrics_open(&m, path, 1, &e);
    n = read_lines(path, lines, 16);
    CHECK(rc == HYP_OK && n == 6, "append keeps the old lines until the first write (%s)", e.msg);
    hyp_metrics_row r = {.step = 4, .loss = 1.25, .val_loss = NAN};
    CHECK(hyp_metrics_write(m, &r, &e) == HYP_OK, "writes step 4 after resuming (%s)", e.msg);
    hyp_metric_kv ev = {"eval_acc", 0.5};
    CHECK(hyp_metrics_write_kv(m, 4, &ev, 1, &e) == HYP_OK, "write_kv writes an extra record");
    hyp_metric_kv clash = {"loss", 1};
    r.extra = &clash;
    r.n_extra = 1;
    CHECK(hyp_metrics_write(m, &r, &e) == HYP_EINPUT && strstr(e.msg, "'loss'"),
          "an extra named like a fixed field is refused (%s)", e.msg);
    hyp_metrics_close(m);
    n = read_lines(path, lines, 16);
    int steps_ok = n == 5;
    for (int i = 0; i < n && steps_ok; i++) {
        j = cJSON_Parse(lines[i]);
        steps_ok = j && cJSON_GetObjectItem(j, "step")->valuedouble == (i < 3 ? i + 1 : 4) &&
                   (i != 3 || cJSON_GetObjectItem(j, "loss")->valuedouble == 1.25);
        cJSON_Delete(j);
    }
    CHECK(steps_ok, "the first write dropped the old steps >= 4 and the torn line: the log "
          "is steps 1, 2, 3, then the new 4 and its record");

    rc = hyp_metrics_open(&m, path, 0, &e);
    hyp_metrics_close(m);
    n = read_lines(path, lines, 16);
    CHECK(rc == HYP_OK && n == 0, "append = 0 starts a fresh log");

    snprintf(path, sizeof path, "%s/run/metrics.jsonl/x", dir);
    m = NULL;
    rc = hyp_metrics_open(&m, path, 0, &e);
    CHECK(rc == HYP_EINPUT && !m && strstr(e.msg, "metrics.jsonl"),
          "an unwritable path is refused (%s)", e.msg);

    snprintf(path, sizeof path, "%s/run/metrics.jsonl", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/run", dir);
    rmdir(path);
    rmdir(dir);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
