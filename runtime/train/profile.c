/* profile.c — the profiled window, the Chrome trace, the per-op table and the memory profile's
 * measurements (profile.h). Never: change what a step computes, print on ranks other than 0
 * (their stdout is /dev/null), or leave a partial file (every output is written atomically). */
#include "profile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "fsio.h"
#include "op_registry.h"

/* VmRSS of this process in MiB (0 where /proc is not readable). */
static double rss_now_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtod(line + 6, NULL);
    if (f) fclose(f);
    return kib / 1024.0;
}

static double rss_peak_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024.0 : 0; /* KiB on Linux */
}

/* An output path must name a file in an existing directory: checked before training starts. */
static int check_out(const char *flag, const char *path, hyp_err *e) {
    char dir[PATH_MAX];
    hyp_fs_dirname(path, dir, sizeof dir);
    if (!*path || !hyp_fs_is_dir(dir))
        return hyp_fail(e, HYP_EINPUT, "%s '%s': the directory '%s' does not exist — create it or give another path", flag,
                        path, dir);
    if (hyp_fs_is_dir(path))
        return hyp_fail(e, HYP_EINPUT, "%s '%s' is a directory — give a file name", flag, path);
    return HYP_OK;
}

static void beside_plan(const char *plan_path, const char *name, char *out, size_t n) {
    char dir[PATH_MAX / 2]; /* plus a name of < 256 bytes (plan.h) */
    hyp_fs_dirname(plan_path, dir, sizeof dir);
    if (name[0] == '/') snprintf(out, n, "%s", name);
    else snprintf(out, n, "%s/%s", dir, name);
}

int train_prof_open(train_prof *t, const char *profile, const char *steps, const char *memory_profile, const plan_t *p,
                    const char *plan_path, int rank, int world, hyp_err *e) {
    memset(t, 0, sizeof *t);
    t->p = p, t->rank = rank, t->world = world;
    t->hw = t->written_bytes = -1;
    if (profile && strcmp(profile, "none")) t->want_trace = 1, snprintf(t->trace, sizeof t->trace, "%s", profile);
    else if (!profile && p->prof_trace[0]) t->want_trace = 1, beside_plan(plan_path, p->prof_trace, t->trace, sizeof t->trace);
    if (memory_profile && strcmp(memory_profile, "none")) t->want_svg = 1, snprintf(t->svg, sizeof t->svg, "%s", memory_profile);
    else if (!memory_profile && p->memprof_svg[0]) t->want_svg = 1, beside_plan(plan_path, p->memprof_svg, t->svg, sizeof t->svg);
    if (steps) {
        char *end;
        errno = 0;
        long a = strtol(steps, &end, 10), b = -1;
        if (*end == ':') b = strtol(end + 1, &end, 10);
        if (errno || *end || a < 1 || b < a || b - a >= 1000)
            return hyp_fail(e, HYP_EINPUT, "--profile-steps '%s' is not A:B with 1 <= A <= B < A + 1000 — e.g. --profile-steps 5:7", steps);
        if (!t->want_trace && !t->want_svg)
            return hyp_fail(e, HYP_EINPUT, "--profile-steps needs --profile FILE or --memory-profile FILE (or a trainer generated with --enable profile / memory-profile) — add one");
        t->first = (int)a, t->last = (int)b, t->have_window = t->from_flag = 1;
    } else if (p->prof_steps > 0) {
        t->first = p->prof_start > 0 ? p->prof_start : 1, t->last = t->first + p->prof_steps - 1, t->have_window = 1;
    }
    if (rank > 0 && t->want_trace) { /* every rank profiles its own work */
        size_t n = strlen(t->trace);
        snprintf(t->trace + n, sizeof t->trace - n, ".rank%d", rank);
    }
    if (rank > 0) t->want_svg = 0;
    int rc = HYP_OK;
    if (t->want_trace) rc = check_out(profile ? "--profile" : "plan.json profile.trace", t->trace, e);
    if (!rc && t->want_svg) rc = check_out(memory_profile ? "--memory-profile" : "plan.json memory_profile.svg", t->svg, e);
    if (!rc && (t->want_trace || t->want_svg)) rc = memprof_build(&t->mem, p, e);
    t->base_rss_mib = rss_now_mib();
    return rc;
}

/* The window inside the run's steps start+1 .. last. */
static int resolve(train_prof *t, int start, int last, hyp_err *e) {
    t->resolved = 1;
    int lo = start + 1;
    if (t->have_window && (t->last < lo || t->first > last)) {
        if (t->from_flag)
            return hyp_fail(e, HYP_EINPUT, "--profile-steps %d:%d: this run trains steps %d..%d — choose steps inside them",
                            t->first, t->last, lo, last);
        if (t->rank == 0)
            fprintf(stderr, "train: warning: the plan's profile window (steps %d..%d) lies outside this run's steps %d..%d: profiling the default window instead\n",
                    t->first, t->last, lo, last);
        t->have_window = 0;
    }
    if (!t->have_window) { /* after the warm-up step(s) the tokens/s leave out */
        t->first = lo + t->p->metrics_skip, t->last = t->first + 2;
        if (t->first > last) t->first = lo > last - 2 ? lo : last - 2;
    }
    if (t->first < lo) t->first = lo;
    if (t->last > last) t->last = last;
    return HYP_OK;
}

static int write_outputs(train_prof *t, train_backend *b, hyp_err *e);

int train_prof_step_begin(train_prof *t, train_backend *b, int step, int start, int last, hyp_err *e) {
    if (!t->want_trace && !t->want_svg) return HYP_OK;
    int rc;
    if (!t->resolved && (rc = resolve(t, start, last, e))) return rc;
    if (t->written || step < t->first) return HYP_OK;
    if (step > t->last) return write_outputs(t, b, e);
    if (step == t->first) {
        hyp_prof_cur = &t->rec;
        /* the arena's high-water mark: the cpu executor's activations filled with a sentinel */
        if (t->want_svg && b->x->acts && b->i->caps.host_buffers) {
            memprof_arm(b->x->acts, t->p->act_floats);
            t->armed = 1;
        }
    }
    t->rec.step = step;
    hyp_prof_span s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "step %d", step);
    s.cat = HYP_PROF_STEP, s.tid = HYP_PROF_TID_HOST, s.pass = -1, s.op = -1, s.index = -1, s.step = step;
    s.ts_us = hyp_prof_now_us();
    hyp_prof_add(&t->rec, &s); /* its duration at the end */
    return HYP_OK;
}

int train_prof_step_end(train_prof *t, train_backend *b, int step, double dt_s, hyp_err *e) {
    (void)e;
    if (hyp_prof_cur != &t->rec || t->rec.step != step) return HYP_OK;
    hyp_prof_flush(&t->rec); /* the device's events: the step ended with a synchronize */
    for (int i = t->rec.n - 1; i >= 0; i--)
        if (t->rec.spans[i].cat == HYP_PROF_STEP && t->rec.spans[i].step == step && t->rec.spans[i].dur_us == 0 &&
            !strncmp(t->rec.spans[i].name, "step ", 5)) {
            t->rec.spans[i].dur_us = hyp_prof_now_us() - t->rec.spans[i].ts_us;
            break;
        }
    t->rec.step = 0;
    t->step_us += 1e6 * dt_s;
    t->steps++;
    if (t->armed) {
        memprof_scan(b->x->acts, t->p->act_floats, &t->hw, &t->written_bytes);
        t->armed = 0;
    }
    return HYP_OK;
}

int train_prof_finish(train_prof *t, train_backend *b, hyp_err *e) {
    if ((!t->want_trace && !t->want_svg) || t->written || !t->steps) {
        if (hyp_prof_cur == &t->rec) hyp_prof_cur = NULL;
        return HYP_OK;
    }
    return write_outputs(t, b, e);
}

void train_prof_close(train_prof *t) {
    if (hyp_prof_cur == &t->rec) hyp_prof_cur = NULL;
    hyp_prof_free(&t->rec);
    memprof_free(&t->mem);
}

/* ---- the trace ---------------------------------------------------------------------------------- */

static const char *PASS_NAMES[3] = {"forward", "backward", "loss"};

static cJSON *meta(const char *what, int tid, const char *name) {
    cJSON *m = cJSON_CreateObject(), *a = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", what);
    cJSON_AddStringToObject(m, "ph", "M");
    cJSON_AddNumberToObject(m, "pid", 0);
    cJSON_AddNumberToObject(m, "tid", tid);
    cJSON_AddStringToObject(a, "name", name);
    cJSON_AddItemToObject(m, "args", a);
    return m;
}

/* Sum of the leaf spans inside the window's steps (the op and phase times), microseconds. */
static double leaf_sum_us(const hyp_prof *r) {
    double s = 0;
    for (int i = 0; i < r->n; i++)
        if (r->spans[i].leaf && r->spans[i].step > 0) s += r->spans[i].dur_us;
    return s;
}

static int write_trace(train_prof *t, const char *device, int dev, hyp_err *e) {
    const hyp_prof *r = &t->rec;
    double t0 = r->n ? r->spans[0].ts_us : 0;
    for (int i = 0; i < r->n; i++)
        if (r->spans[i].ts_us < t0) t0 = r->spans[i].ts_us;
    cJSON *root = cJSON_CreateObject(), *ev = cJSON_AddArrayToObject(root, "traceEvents");
    char pname[160];
    snprintf(pname, sizeof pname, "rank %d: %s on %s", t->rank, t->p->model_name, device);
    cJSON_AddItemToArray(ev, meta("process_name", 0, pname));
    cJSON_AddItemToArray(ev, meta("thread_name", HYP_PROF_TID_HOST, "host"));
    if (dev) { /* a device track: the kernels' stream */
        char dn[64];
        snprintf(dn, sizeof dn, "%s compute stream", device);
        cJSON_AddItemToArray(ev, meta("thread_name", HYP_PROF_TID_DEVICE, dn));
    }
    for (int k = 0; k < 4; k++) /* v2168: the cpu trainer's communication helpers that ran a bucket */
        for (int i = 0; i < r->n; i++)
            if (r->spans[i].tid == HYP_PROF_TID_COMM + k) {
                char cn[64];
                snprintf(cn, sizeof cn, "communication helper %d", k);
                cJSON_AddItemToArray(ev, meta("thread_name", HYP_PROF_TID_COMM + k, cn));
                break;
            }
    for (int i = 0; i < r->n; i++) {
        const hyp_prof_span *s = &r->spans[i];
        cJSON *x = cJSON_CreateObject(), *a = cJSON_CreateObject();
        char name[96];
        if (s->detail[0]) snprintf(name, sizeof name, "%s %s", s->name, s->detail);
        else snprintf(name, sizeof name, "%s", s->name);
        cJSON_AddStringToObject(x, "name", name);
        cJSON_AddStringToObject(x, "cat", hyp_prof_cat_name(s->cat));
        cJSON_AddStringToObject(x, "ph", "X");
        cJSON_AddNumberToObject(x, "ts", s->ts_us - t0);
        cJSON_AddNumberToObject(x, "dur", s->dur_us);
        cJSON_AddNumberToObject(x, "pid", t->rank);
        cJSON_AddNumberToObject(x, "tid", s->tid);
        cJSON_AddNumberToObject(a, "step", s->step);
        if (s->op >= 0) {
            cJSON_AddStringToObject(a, "op", s->name);
            cJSON_AddStringToObject(a, "pass", PASS_NAMES[s->pass]);
            cJSON_AddNumberToObject(a, "index", s->index);
            cJSON_AddStringToObject(a, "buffer", s->detail);
            if (s->flops > 0) {
                cJSON_AddNumberToObject(a, "flops", s->flops);
                if (s->dur_us > 0) cJSON_AddNumberToObject(a, "GFLOP/s", s->flops / s->dur_us * 1e-3);
            }
        }
        cJSON_AddItemToObject(x, "args", a);
        cJSON_AddItemToArray(ev, x);
        /* v2185's counter track: the activation arena's live bytes after each op of the step */
        if (s->op >= 0 && s->pass < 2 && t->mem.live) {
            int pos = s->pass == 0 ? s->index + 1 : t->p->n_fwd + s->index + 1;
            cJSON *c = cJSON_CreateObject(), *ca = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "name", "activation arena (live MiB)");
            cJSON_AddStringToObject(c, "ph", "C");
            cJSON_AddNumberToObject(c, "ts", s->ts_us - t0);
            cJSON_AddNumberToObject(c, "pid", t->rank);
            cJSON_AddNumberToObject(ca, "live", t->mem.live[pos] / 1048576.0);
            cJSON_AddItemToObject(c, "args", ca);
            cJSON_AddItemToArray(ev, c);
        }
    }
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON *o = cJSON_AddObjectToObject(root, "otherData");
    char w[32];
    snprintf(w, sizeof w, "%d:%d", t->first, t->first + t->steps - 1);
    cJSON_AddStringToObject(o, "steps", w);
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "model", t->p->model_name);
    cJSON_AddNumberToObject(o, "step_time_ms", t->step_us / 1e3);
    cJSON_AddNumberToObject(o, "op_time_ms", leaf_sum_us(r) / 1e3);
    cJSON_AddNumberToObject(o, "dropped", (double)r->dropped);
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "--profile: out of memory writing the trace");
    int rc = hyp_fs_write_atomic(t->trace, txt, strlen(txt), e);
    free(txt);
    return rc;
}

/* ---- the per-op table ------------------------------------------------------------------------- */

typedef struct {
    char name[40];
    int cat, tid, calls;
    double us, flops;
} row_t;

static int row_cmp(const void *a, const void *b) {
    double x = ((const row_t *)a)->us, y = ((const row_t *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* [start, end) pairs by start */
static int cmp_start(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

/* v2168: the union of the helper tracks' bucket spans inside the steps (*total_us) and the host's
 * comm_wait_exposed phases (*exposed_us); 0 when no helper ran a bucket. */
static int comm_split(const hyp_prof *r, double *total_us, double *exposed_us) {
    *total_us = *exposed_us = 0;
    double *iv = malloc(sizeof(double) * 2 * ((size_t)r->n + 1));
    int n = 0;
    if (!iv) return 0;
    for (int i = 0; i < r->n; i++) {
        const hyp_prof_span *s = &r->spans[i];
        if (s->step <= 0) continue;
        if (s->tid == HYP_PROF_TID_HOST && !strcmp(s->name, "comm_wait_exposed")) *exposed_us += s->dur_us;
        if (s->tid >= HYP_PROF_TID_COMM) iv[2 * n] = s->ts_us, iv[2 * n + 1] = s->ts_us + s->dur_us, n++;
    }
    qsort(iv, (size_t)n, 2 * sizeof(double), cmp_start);
    double end = -1e300;
    for (int i = 0; i < n; i++) {
        double from = iv[2 * i] > end ? iv[2 * i] : end;
        if (iv[2 * i + 1] > from) *total_us += iv[2 * i + 1] - from;
        if (iv[2 * i + 1] > end) end = iv[2 * i + 1];
    }
    free(iv);
    return n > 0;
}

static void print_summary(train_prof *t, const char *device, int dev) {
    const hyp_prof *r = &t->rec;
    row_t *rows = calloc((size_t)r->n + 1, sizeof *rows), *out = calloc(16, sizeof *out);
    int nr = 0, no = 0;
    if (!rows || !out) {
        free(rows), free(out);
        return;
    }
    for (int i = 0; i < r->n; i++) {
        const hyp_prof_span *s = &r->spans[i];
        int outside = s->step == 0;
        if (!outside && !s->leaf) continue;
        if (outside && s->op >= 0) continue; /* evaluation ops: inside their "eval" envelope */
        row_t *v = outside ? out : rows;
        int *n = outside ? &no : &nr, k = 0;
        while (k < *n && (strcmp(v[k].name, s->name) || v[k].tid != s->tid)) k++;
        if (k == *n) {
            if (outside && no == 16) continue;
            memset(&v[k], 0, sizeof v[k]);
            snprintf(v[k].name, sizeof v[k].name, "%s", s->name);
            v[k].cat = s->cat, v[k].tid = s->tid;
            (*n)++;
        }
        v[k].calls++, v[k].us += s->dur_us, v[k].flops += s->flops;
    }
    qsort(rows, (size_t)nr, sizeof *rows, row_cmp);
    double step = t->step_us > 0 ? t->step_us : 1, sum = leaf_sum_us(r);
    printf("profile: steps %d..%d on %s (%d step%s) — trace %s (%d events%s)\n", t->first, t->first + t->steps - 1, device,
           t->steps, t->steps == 1 ? "" : "s", t->want_trace ? t->trace : "not written", r->n,
           r->dropped ? ", some dropped: out of memory" : "");
    printf("  %-24s %-13s %-6s %7s %10s %9s %7s %9s\n", "op", "category", "track", "calls", "total ms", "ms/step", "% step",
           "GFLOP/s");
    for (int k = 0; k < nr; k++) {
        char gf[16] = "";
        if (rows[k].flops > 0 && rows[k].us > 0) snprintf(gf, sizeof gf, "%.1f", rows[k].flops / rows[k].us * 1e-3);
        printf("  %-24s %-13s %-6s %7d %10.2f %9.3f %6.1f%% %9s\n", rows[k].name, hyp_prof_cat_name(rows[k].cat),
               rows[k].tid == HYP_PROF_TID_DEVICE ? "device" : rows[k].tid >= HYP_PROF_TID_COMM ? "comm" : "host", rows[k].calls, rows[k].us / 1e3,
               rows[k].us / 1e3 / t->steps, 100 * rows[k].us / step, gf);
    }
    printf("  sum of op and phase times %.2f ms = %.1f%% of the measured step time %.2f ms (%d steps)%s\n", sum / 1e3,
           100 * sum / step, t->step_us / 1e3, t->steps,
           dev ? "; device ops timed by events on the compute stream" : "");
    double ct = 0, cx = 0;
    if (comm_split(r, &ct, &cx))
        printf("  gradient all-reduce (v2168 helpers): %.3f ms/step in flight, %.3f ms/step exposed (comm_wait_exposed), %.3f ms/step hidden under backward\n",
               ct / 1e3 / t->steps, cx / 1e3 / t->steps, (ct > cx ? ct - cx : 0) / 1e3 / t->steps);
    if (no) {
        printf("  outside the steps:");
        for (int k = 0; k < no; k++) printf(" %s %d x %.2f ms", out[k].name, out[k].calls, out[k].us / 1e3 / out[k].calls);
        printf("\n");
    }
    free(rows), free(out);
}

static int write_outputs(train_prof *t, train_backend *b, hyp_err *e) {
    hyp_prof_flush(&t->rec);
    if (hyp_prof_cur == &t->rec) hyp_prof_cur = NULL;
    t->written = 1;
    const char *device = b->name; /* cpu, sim, cuda: the trace names it */
    int dev = b->i->caps.device_kernels;
    int rc = HYP_OK;
    if (t->want_trace) {
        if ((rc = write_trace(t, device, dev, e))) return rc;
        if (t->rank == 0) print_summary(t, device, dev);
    }
    if (t->want_svg) {
        double mem[MEM__COUNT] = {0}, planned = (double)b->x->bytes;
        b->i->memory(b, mem);
        if (dev) /* the device's arenas besides the host's */
            for (int k = 0; k < MEM__COUNT; k++) planned += mem[k];
        memprof_measured ms = {t->hw, t->written_bytes, t->base_rss_mib, rss_peak_mib(), planned / 1048576.0, device};
        if ((rc = memprof_write_svg(&t->mem, t->p, &ms, t->svg, e))) return rc;
        const memprof *m = &t->mem;
        int np = 0;
        for (int k = 0; k < m->n; k++) np += memprof_live_at(m, k, m->peak_at);
        printf("memory profile: %s — activation arena planned %.3f MiB (v2167 plan; %.3f MiB without reuse), peak live %.3f MiB at op %d of %d (%d buffers; plan: %.3f MiB; forward peak %.3f, backward peak %.3f MiB)\n",
               t->svg, t->p->act_bytes / 1048576.0, t->p->act_bytes_unplanned / 1048576.0, m->peak / 1048576.0, m->peak_at,
               m->n_sched, np, t->p->act_bytes_peak_live / 1048576.0, m->peak_fwd / 1048576.0, m->peak_bwd / 1048576.0);
        if (t->hw >= 0)
            printf("  measured arena high-water %lld B = %.2f%% of the planned arena %lld B (its highest buffer ends at %lld B; the rest is alignment); %.3f MiB written in step %d\n",
                   (long long)t->hw, 100.0 * (double)t->hw / (double)(t->p->act_bytes ? t->p->act_bytes : 1),
                   (long long)t->p->act_bytes, (long long)t->mem.top_end, t->written_bytes / 1048576.0, t->first);
        else
            printf("  arena high-water: not measured on %s (the activation arena is device memory)\n", device);
        double grown = ms.rss_peak_mib - ms.rss_base_mib;
        printf("  peak RSS %.1f MiB = %.1f MiB before the executors + %.1f MiB measured vs %.1f MiB planned executor bytes (ratio %.3f; %+.1f MiB not in the plan: the loader, libraries, thread stacks)\n",
               ms.rss_peak_mib, ms.rss_base_mib, grown, ms.planned_mib, ms.planned_mib > 0 ? grown / ms.planned_mib : 0.0,
               grown - ms.planned_mib);
    }
    fflush(stdout);
    return rc;
}
