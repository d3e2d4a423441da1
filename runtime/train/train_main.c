/* train_main.c — the generated trainer's program (`out/NAME/train`): loads the plan that `gen`
 * wrote next to it, trains on pre-tokenized shards with the CPU backend (or, for --target sim and
 * sm_XX, the device loop of train_dev.c), evaluates, checkpoints, resumes bit-exactly, logs metrics
 * and samples text. Data parallelism, ZeRO and checkpoints of the CPU backend live in train_dp.c.
 *
 *   train --data DIR [--steps N] [--batch B] [--seq T] [--grad-accum K] [--lr X] [--seed S]
 *         [--ckpt-dir D] [--ckpt-every N] [--resume] [--metrics FILE] [--sample N]
 *         [--eval-every N] [--eval-batches N] [--temperature X] [--top-k K] [--plan FILE]
 *   train sample --ckpt-dir D [--sample N] [--prompt TEXT] [--temperature X] [--top-k K]
 *
 * Exit status: 0 done, 1 environment failure, 2 bad input (flags, data, plan, checkpoint) —
 * always with one line "where: what — how to fix". Never leaves a half-written checkpoint.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "ckpt.h"
#include "coll.h"
#include "data.h"
#include "exec.h"
#include "exec_dev.h"
#include "metrics.h"
#include "ops_cpu.h"
#include "optim.h"
#include "plan.h"
#include "rng.h"
#include "train.h"
#include "train_dev.h"
#include "train_dp.h"

typedef struct {
    const char *data, *ckpt_dir, *metrics, *plan, *prompt;
    int steps, batch, seq, grad_accum, ckpt_every, resume, sample, eval_every, eval_batches, top_k;
    int sample_mode, keep, stop_after;
    double lr, temperature;
    long long seed;
    int have_seed, have_lr;
} args_t;

static const char *FLAGS[] = {"--data", "--steps", "--batch", "--seq", "--grad-accum", "--lr", "--seed",
                              "--ckpt-dir", "--ckpt-every", "--resume", "--metrics", "--sample",
                              "--eval-every", "--eval-batches", "--temperature", "--top-k", "--plan",
                              "--prompt", "--keep", "--stop-after", "--help", NULL};

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];
    if (la > 63 || lb > 63) return 99;
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "train: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " — run train --help for the flags\n");
    return HYP_EINPUT;
}

static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "train: %s '%s' is not an integer in [%lld, %lld] — give a valid value\n", flag, s, lo, hi);
        return HYP_EINPUT;
    }
    *out = v;
    return 0;
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "train: %s '%s' is not a number in [%g, %g] — give a valid value\n", flag, s, lo, hi);
        return HYP_EINPUT;
    }
    *out = v;
    return 0;
}

static const char *USAGE =
    "usage: train --data DIR [--steps N] [--batch B] [--seq T] [--grad-accum K] [--lr X] [--seed S]\n"
    "             [--ckpt-dir D] [--ckpt-every N] [--keep K] [--resume] [--metrics FILE] [--sample N]\n"
    "             [--eval-every N] [--eval-batches N] [--temperature X] [--top-k K] [--plan FILE]\n"
    "             [--stop-after N]   stop (checkpointing) after N steps of this run; the LR schedule\n"
    "                                still spans --steps, so a later --resume continues it exactly\n"
    "       train sample --ckpt-dir D [--sample N] [--prompt TEXT] [--temperature X] [--top-k K]\n";

static int parse_args(int argc, char **argv, args_t *a) {
    memset(a, 0, sizeof *a);
    a->temperature = 0.8;
    a->top_k = 40;
    a->keep = 3;
    a->eval_every = -1;
    a->eval_batches = -1;
    int i = 1;
    if (argc > 1 && !strcmp(argv[1], "sample")) {
        a->sample_mode = 1;
        a->sample = 200;
        i = 2;
    }
    for (; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(USAGE, stdout);
            exit(0);
        }
        if (!strcmp(f, "--resume")) {
            a->resume = 1;
            continue;
        }
        int known = 0;
        for (const char **k = FLAGS; *k; k++) known |= !strcmp(*k, f);
        if (!known) {
            const char *best = NULL;
            int bd = 99;
            for (const char **k = FLAGS; *k; k++) {
                int d = edit_distance(f, *k);
                if (d < bd) bd = d, best = *k;
            }
            if (bd <= 3) {
                fprintf(stderr, "train: unknown flag '%s' (did you mean '%s'?) — run train --help for the flags\n", f, best);
                return HYP_EINPUT;
            }
            return usage_error("unknown argument '%s'", f);
        }
        if (i + 1 >= argc) return usage_error("%s needs a value", f);
        const char *v = argv[++i];
        long long n;
        int rc = 0;
        if (!strcmp(f, "--data")) a->data = v;
        else if (!strcmp(f, "--ckpt-dir")) a->ckpt_dir = v;
        else if (!strcmp(f, "--metrics")) a->metrics = v;
        else if (!strcmp(f, "--plan")) a->plan = v;
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--lr")) rc = parse_num(f, v, 0, 10, &a->lr), a->have_lr = 1;
        else if (!strcmp(f, "--temperature")) rc = parse_num(f, v, 0, 100, &a->temperature);
        else if (!strcmp(f, "--seed")) rc = parse_int(f, v, 0, (1LL << 52), &a->seed), a->have_seed = 1;
        else {
            rc = parse_int(f, v, 0, 1LL << 30, &n);
            if (!rc) {
                if (!strcmp(f, "--steps")) a->steps = (int)n;
                else if (!strcmp(f, "--batch")) a->batch = (int)n;
                else if (!strcmp(f, "--seq")) a->seq = (int)n;
                else if (!strcmp(f, "--grad-accum")) a->grad_accum = (int)n;
                else if (!strcmp(f, "--ckpt-every")) a->ckpt_every = (int)n;
                else if (!strcmp(f, "--sample")) a->sample = (int)n;
                else if (!strcmp(f, "--eval-every")) a->eval_every = (int)n;
                else if (!strcmp(f, "--eval-batches")) a->eval_batches = (int)n;
                else if (!strcmp(f, "--top-k")) a->top_k = (int)n;
                else if (!strcmp(f, "--keep")) a->keep = (int)n;
                else if (!strcmp(f, "--stop-after")) a->stop_after = (int)n;
            }
        }
        if (rc) return rc;
    }
    if (!a->sample_mode && !a->data) {
        fprintf(stderr, "train: --data DIR is required — prepare shards with `gen data corpus.txt -o DIR`\n");
        return HYP_EINPUT;
    }
    if (a->sample_mode && !a->ckpt_dir) {
        fprintf(stderr, "train: sample needs --ckpt-dir D — point it at a training run's checkpoint directory\n");
        return HYP_EINPUT;
    }
    if ((a->ckpt_every || a->resume) && !a->ckpt_dir) {
        fprintf(stderr, "train: --ckpt-every/--resume need --ckpt-dir D — say where checkpoints live\n");
        return HYP_EINPUT;
    }
    if (a->grad_accum < 0 || a->batch < 0 || a->seq < 0) return usage_error("%s", "sizes must be positive");
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_eta(double s, char *buf, size_t n) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

/* The plan sits next to the trainer binary unless --plan says otherwise. */
static void default_plan_path(char *out, size_t n) {
    char exe[PATH_MAX - 16];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(out, n, "plan.json");
        return;
    }
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, n, "%s/plan.json", exe);
}

static float eval_loss(exec_t *x, hyp_loader *val, int batches, hyp_err *e, int *rc) {
    /* each rank evaluates its own windows; the caller averages over ranks */
    hyp_loader_reset(val);
    double s = 0;
    *rc = 0;
    for (int i = 0; i < batches; i++) {
        if ((*rc = hyp_loader_next(val, x->tokens, x->targets, e))) return NAN;
        s += exec_eval_loss(x);
    }
    return batches ? (float)(s / batches) : NAN;
}

/* Samples n tokens after the prompt with temperature and top-k; prints bytes for the byte
 * tokenizer, token ids otherwise. */
static int sample_text(exec_t *x, const args_t *a, uint64_t seed, FILE *out) {
    const plan_t *p = x->p;
    int logits_buf = -1;
    for (int i = 0; i < p->n_bufs; i++)
        if (!strcmp(p->bufs[i].name, "logits")) logits_buf = i;
    if (logits_buf < 0) return HYP_EINPUT;
    int T = p->T, n = a->sample;
    int cap = n + (a->prompt ? (int)strlen(a->prompt) : 0) + 1;
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)cap);
    float *probs = malloc(sizeof(float) * (size_t)p->V);
    int *idx = malloc(sizeof(int) * (size_t)p->V);
    if (!ctx || !probs || !idx) {
        free(ctx), free(probs), free(idx);
        return HYP_EFAIL;
    }
    int len = 0;
    if (a->prompt && *a->prompt)
        for (const unsigned char *s = (const unsigned char *)a->prompt; *s; s++) ctx[len++] = *s;
    else ctx[len++] = '\n';
    if (a->prompt) fputs(a->prompt, out);
    hyp_rng rng;
    hyp_rng_seed2(&rng, seed, 0x5a3d1e);
    int is_byte = !strcmp(p->tokenizer, "byte");
    for (int s = 0; s < n; s++) {
        int t = len < T ? len : T;
        hyp_err e;
        exec_bind(x, 1, t, &e);
        memcpy(x->tokens, ctx + len - t, sizeof(int32_t) * (size_t)t);
        exec_forward(x);
        const float *lg = exec_buf(x, logits_buf) + (size_t)(t - 1) * p->Vp;
        int V = p->V, K = a->top_k > 0 && a->top_k < V ? a->top_k : V;
        for (int i = 0; i < V; i++) idx[i] = i;
        /* partial selection of the K largest logits */
        for (int i = 0; i < K; i++) {
            int best = i;
            for (int j = i + 1; j < V; j++)
                if (lg[idx[j]] > lg[idx[best]]) best = j;
            int tmp = idx[i];
            idx[i] = idx[best];
            idx[best] = tmp;
        }
        int next;
        if (a->temperature <= 0) next = idx[0];
        else {
            double mx = lg[idx[0]], sum = 0;
            for (int i = 0; i < K; i++) sum += probs[i] = (float)exp((lg[idx[i]] - mx) / a->temperature);
            double r = hyp_rng_uniform_f64(&rng) * sum, c = 0;
            next = idx[K - 1];
            for (int i = 0; i < K; i++) {
                c += probs[i];
                if (r < c) {
                    next = idx[i];
                    break;
                }
            }
        }
        ctx[len++] = next;
        if (is_byte) fputc(next, out);
        else fprintf(out, "%d ", next);
    }
    fputc('\n', out);
    free(ctx), free(probs), free(idx);
    return 0;
}

static int run(int argc, char **argv, hyp_coll *coll);

/* The weight decay the banner reports: the largest of the optimizer's groups. */
static double max_weight_decay(const hyp_optim_cfg *c) {
    double wd = 0;
    for (int g = 0; g < c->n_groups; g++)
        if (c->groups[g].weight_decay > wd) wd = c->groups[g].weight_decay;
    return wd;
}

int main(int argc, char **argv) {
#if defined(__SSE__)
    /* flush denormals to zero (FTZ | DAZ) before any OpenMP thread exists, so every worker
     * inherits it: tiny products in backward otherwise cost ~100 cycles each */
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
    hyp_coll *coll = NULL;
    hyp_err e = {{0}};
    int rc = hyp_coll_init(&argc, &argv, &coll, &e);
    if (rc) {
        fprintf(stderr, "train: %s\n", e.msg);
        return rc;
    }
    /* only rank 0 talks; every rank reports its own errors on stderr */
    if (hyp_coll_rank(coll) != 0 && !freopen("/dev/null", "w", stdout)) rc = HYP_EFAIL;
    if (!rc) rc = run(argc, argv, coll);
    hyp_coll_finalize(coll);
    return rc;
}

static int run(int argc, char **argv, hyp_coll *coll) {
    args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    hyp_err e = {{0}};
    char plan_path[PATH_MAX];
    if (a.plan) snprintf(plan_path, sizeof plan_path, "%s", a.plan);
    else default_plan_path(plan_path, sizeof plan_path);
    plan_t plan;
    if ((rc = plan_load(plan_path, &plan, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        return rc;
    }
    const hyp_optim_i *optimizer = NULL;
    if ((rc = optim_cfg_from_v1(&plan, &e)) || (rc = hyp_optim_open(&plan, &optimizer, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        hyp_optim_cfg_free(&plan);
        plan_free(&plan);
        return rc;
    }
    /* the device backends (train_dev.c) train in the host executor's ZeRO layout (stage 3: its layer
     * groups); the host keeps a mirror (initialization, checkpoints, sampling) without activations */
    int on_device = !strcmp(plan.backend, "sim") || !strcmp(plan.backend, "cuda");
    dp_t d = {coll, hyp_coll_rank(coll), hyp_coll_world(coll), plan.zero_stage, optimizer};
    train_dev dv = {0}; /* the device backend (sim or cuda), opened below when the plan says so */
    int is0 = d.rank == 0;
    int B = a.batch ? a.batch : plan.B, T = a.seq ? a.seq : plan.T;
    int K = a.grad_accum ? a.grad_accum : plan.grad_accum;
    train_opts opt;
    train_opts_from_plan(&opt, &plan);
    if (a.have_lr) opt.lr = a.lr;
    if (a.steps) opt.total_steps = a.steps;
    uint64_t seed = a.have_seed ? (uint64_t)a.seed : plan.seed;
    int eval_every = a.eval_every >= 0 ? a.eval_every : plan.eval_every;
    int eval_batches = a.eval_batches >= 0 ? a.eval_batches : plan.eval_batches;

    exec_t x;
    if ((rc = on_device && !a.sample_mode ? exec_init_mirror(&x, &plan, coll, d.stage, &e)
                                          : exec_init_dp(&x, &plan, coll, d.stage, &e)) ||
        (rc = exec_bind(&x, B, T, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        exec_free(&x);
        hyp_optim_cfg_free(&plan);
        plan_free(&plan);
        return rc;
    }
    exec_init_params(&x, seed); /* same seed on every rank: identical replicas */
    hyp_rng rng;
    hyp_rng_seed2(&rng, seed, 1);

    int start_step = 0;
    hyp_loader_state lstate = {0, 0};
    if (a.resume || a.sample_mode) {
        hyp_ckpt_state st;
        rc = dp_load(&d, &x, a.ckpt_dir, a.sample_mode, plan.state_hash, &st, &e);
        if (rc == HYP_OK) {
            start_step = (int)st.step;
            hyp_rng_set_state(&rng, st.rng);
            /* the checkpoint counts windows of the whole data-parallel group (elastic resume, v2175):
             * each of the current ranks continues at its share of them */
            lstate.epoch = st.loader_epoch;
            lstate.position = st.loader_position / (uint64_t)d.world;
            if (st.loader_position % (uint64_t)d.world) {
                fprintf(stderr, "train: %s: %llu windows of this epoch were consumed, which %d ranks cannot split evenly — resume with a world size dividing it\n",
                        st.path, (unsigned long long)st.loader_position, d.world);
                rc = HYP_EINPUT;
                goto cleanup_early;
            }
            printf("resumed from %s at step %d (saved by %s; now %d rank%s)\n", st.path, start_step,
                   st.plan[0] ? st.plan : "a trainer of this plan", d.world, d.world == 1 ? "" : "s");
        } else if (rc == HYP_ENOCKPT && a.resume && !a.sample_mode) {
            printf("no checkpoint in %s yet: starting from step 0\n", a.ckpt_dir);
            rc = 0;
        } else {
            fprintf(stderr, "train: %s\n", e.msg);
            rc = rc == HYP_ENOCKPT ? HYP_EINPUT : rc;
            goto cleanup_early;
        }
    }
    if (a.sample_mode) { /* sampling runs on the host executor: same weights, same numerics */
        if (is0) rc = sample_text(&x, &a, seed, stdout);
        goto cleanup_early;
    }
    if (on_device) {
        /* the device loop (train_dev.c); a trainer for sm_XX never falls back to the CPU executor */
        if ((rc = train_dev_open(&dv, &plan, plan_path, &x, d.coll, plan.zero_stage, B, T, &e))) {
            fprintf(stderr, "train: %s\n", e.msg);
            goto cleanup_early;
        }
        if (!strcmp(plan.backend, "sim"))
            printf("backend: sim — the generated CUDA kernels (kernels/ next to the plan) run on the CPU simulator (slow; for tests)\n");
        else
            printf("backend: cuda — %s, the compiled kernels (kernels/*.cubin) through the CUDA driver\n", dv.dev->info.name);
    }

    hyp_loader *train = NULL, *val = NULL;
    if ((rc = hyp_loader_open_rc(a.data, "train", B, T, seed, d.rank, d.world, &train, &e)) ||
        (rc = hyp_loader_require_vocab(train, plan.V, &e)) ||
        (rc = hyp_loader_set_state(train, &lstate, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        hyp_loader_close(train);
        goto cleanup_early;
    }
    if (eval_every > 0 && eval_batches > 0) {
        hyp_err ve;
        if (hyp_loader_open_rc(a.data, "val", B, T, seed, d.rank, d.world, &val, &ve) == HYP_OK)
            rc = hyp_loader_require_vocab(val, plan.V, &e);
        else
            printf("note: no validation split in %s (%s); validation is off\n", a.data, ve.msg);
        if (rc) {
            fprintf(stderr, "train: %s\n", e.msg);
            hyp_loader_close(train);
            hyp_loader_close(val);
            goto cleanup_early;
        }
    }
    hyp_metrics *mlog = NULL;
    if (is0 && a.metrics && (rc = hyp_metrics_open(&mlog, a.metrics, start_step > 0, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        hyp_loader_close(train);
        hyp_loader_close(val);
        goto cleanup_early;
    }

    double fpt = plan.flops_per_token; /* at the planned T; attention part scales with T */
    int64_t tokens_per_step = (int64_t)B * T * K * d.world;
    printf("hyperion trainer: model %s (%s, %.2fM params) | target %s | plan %s\n", plan.model_name, plan.arch,
           plan.n_params / 1e6, plan.target, plan.hash);
    printf("batch %d x seq %d x accum %d x ranks %d = %lld tokens/step | %d threads/rank | activations %.1f MiB (%.1f MiB without the memory plan)\n",
           B, T, K, d.world, (long long)tokens_per_step, omp_get_max_threads(), 4.0 * plan.act_floats / 1048576.0,
           4.0 * plan.act_floats_unplanned / 1048576.0);
    if (dv.on) train_dev_print_memory(&dv, &e); /* the device's arenas (the host mirror only stages) */
    else dp_print_memory(&d, &x, &e);
    printf("data: %llu train tokens (%d shard%s)%s | steps %d | lr %.3g (%s, warmup %d) | clip %g | wd %g\n",
           (unsigned long long)hyp_loader_total_tokens(train), hyp_loader_num_shards(train),
           hyp_loader_num_shards(train) == 1 ? "" : "s", val ? ", with validation" : "", opt.total_steps, opt.lr,
           opt.schedule, opt.warmup_steps, opt.max_norm, max_weight_decay(&plan.optim));
    fflush(stdout);

    double t_start = now_s(), tok_s = 0;
    int steps_timed = 0;
    float last_loss = NAN;
    int last_step = opt.total_steps;
    if (a.stop_after > 0 && start_step + a.stop_after < last_step) last_step = start_step + a.stop_after;
    int done_steps = 0;
    for (int step = start_step + 1; step <= last_step && rc == 0; step++) {
        double t0 = now_s();
        double loss = 0;
        double norm = 0, lr = 0;
        float scale = 1;
        if (dv.on) { /* the device backends: train_dev.c */
            lr = train_lr_at(&opt, step);
            if ((rc = train_dev_step(&dv, &x, train, &opt, K, step, lr, &loss, &norm, &scale, &e))) break;
        } else {
        if (d.stage >= 3) op_zero(x.gshard, x.shard);
        else op_zero(x.grads, x.shard * d.world);
        for (int k = 0; k < K; k++) {
            if ((rc = hyp_loader_next(train, x.tokens, x.targets, &e))) break;
            exec_forward(&x);
            double cnt = (double)exec_count_targets(&x), gcnt = cnt;
            if ((rc = hyp_coll_allreduce_f64(d.coll, &gcnt, 1, &e))) break;
            /* every token of the global batch weighs 1 / (tokens * K): the sum over ranks is the mean */
            float mean = exec_backward(&x, gcnt > 0 ? (float)(1.0 / (gcnt * K)) : 0.0f);
            loss += gcnt > 0 ? mean * cnt / gcnt / K : 0;
            if ((rc = exec_z3_status(&x, &e))) break;
        }
        if (rc) break;
        if ((rc = hyp_coll_allreduce_f64(d.coll, &loss, 1, &e))) break;
        if ((rc = dp_reduce_grads(&d, &x, &norm, &e))) break;
        scale = train_clip_scale(&opt, norm);
        lr = train_lr_at(&opt, step);
        if ((rc = dp_step(&d, &x, lr, step, scale, &e))) break;
        if ((rc = op_cpu_check(&e))) break;
        if (plan.fp8_slots) { /* every rank must scale with the same amax (TE reduces it too) */
            for (int i = 0; i < plan.fp8_slots && d.world > 1 && !rc; i++)
                rc = hyp_coll_allreduce_max_f32(d.coll, &x.fp8[i].amax_history[x.fp8[i].pos], 1, &e);
            if (rc) break;
            exec_fp8_step(&x);
        }
        } /* cpu backend */
        double dt = now_s() - t0;
        last_loss = (float)loss;
        if (!isfinite(loss)) {
            fprintf(stderr, "train: step %d: the loss is %f — lower --lr or enable clipping (--enable clip)\n", step, loss);
            rc = HYP_EFAIL;
            break;
        }
        double tps = tokens_per_step / dt;
        if (step > start_step + 1) { /* the first step warms caches: keep it out of the average */
            tok_s += tps;
            steps_timed++;
        }
        double avg_tps = steps_timed ? tok_s / steps_timed : tps;
        double flops = (fpt - plan.flops_attn_coef * plan.T + plan.flops_attn_coef * T) * tps / d.world;
        char eta[32];
        fmt_eta((last_step - step) * tokens_per_step / avg_tps, eta, sizeof eta);
        float vl = NAN;
        int do_eval = val && (step % eval_every == 0 || step == last_step);
        if (do_eval) {
            double v = dv.on ? train_dev_eval(&dv, &x, val, eval_batches, &e, &rc) : eval_loss(&x, val, eval_batches, &e, &rc);
            exec_bind(&x, B, T, &e);
            if (rc || (rc = exec_z3_status(&x, &e))) break;
            if ((rc = hyp_coll_allreduce_f64(d.coll, &v, 1, &e))) break;
            vl = (float)(v / d.world);
        }
        char mfu[16] = "  n/a"; /* no peak for the target (sim) */
        if (plan.peak_flops > 0) snprintf(mfu, sizeof mfu, "%5.1f%%", 100.0 * flops / plan.peak_flops);
        printf("step %5d/%d | loss %.4f | lr %.2e | norm %.3f%s | %7.0f tok/s | MFU %s | ETA %s",
               step, opt.total_steps, loss, lr, norm, scale < 1 ? " (clipped)" : "", tps, mfu, eta);
        if (do_eval) printf(" | val %.4f", vl);
        printf("\n");
        fflush(stdout);
        if (mlog) {
            hyp_metrics_row row = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens_per_s = tps,
                                   .val_loss = do_eval ? vl : NAN};
            if ((rc = hyp_metrics_write(mlog, &row, &e))) break;
        }
        done_steps++;
        if (a.ckpt_dir && ((a.ckpt_every && step % a.ckpt_every == 0) || step == last_step)) {
            if (dv.on && (rc = train_dev_download(&dv, &x, &e))) break;
            {
                hyp_loader_state ls;
                hyp_loader_get_state(train, &ls);
                hyp_ckpt_state st;
                memset(&st, 0, sizeof st);
                st.step = (uint64_t)step;
                st.tokens_seen = (uint64_t)step * (uint64_t)tokens_per_step;
                hyp_rng_get_state(&rng, st.rng);
                st.loader_epoch = ls.epoch;
                st.loader_position = ls.position * (uint64_t)d.world; /* windows of the whole group */
                snprintf(st.config_hash, sizeof st.config_hash, "%s", plan.state_hash);
                snprintf(st.plan, sizeof st.plan, "%s on %d rank%s, ZeRO stage %d", plan.model_name, d.world,
                         d.world == 1 ? "" : "s", plan.zero_stage);
                rc = dp_save(&d, &x, a.ckpt_dir, a.keep, &st, &e);
            }
            if (rc) break;
        }
    }
    if (rc) fprintf(stderr, "train: %s\n", e.msg);
    else
        printf("done: %d steps in %.1f s, final loss %.4f, mean %.0f tok/s\n", done_steps, now_s() - t_start, last_loss,
               steps_timed ? tok_s / steps_timed : 0.0);
    if (!rc && dv.on) rc = train_dev_download(&dv, &x, &e); /* sampling below runs on the host */
    if (!rc && a.sample > 0 && d.stage >= 3) rc = dp_unshard(&x, &e); /* rank 0 samples alone */
    if (!rc && a.sample > 0 && is0 && (rc = exec_alloc_acts(&x, &e))) /* a device run's mirror has none */
        fprintf(stderr, "train: %s\n", e.msg);
    if (!rc && a.sample > 0 && is0) {
        printf("--- sample (%d tokens, temperature %.2f, top-k %d) ---\n", a.sample, a.temperature, a.top_k);
        rc = sample_text(&x, &a, seed, stdout);
    }
    hyp_metrics_close(mlog);
    hyp_loader_close(train);
    hyp_loader_close(val);
cleanup_early:
    train_dev_close(&dv);
    exec_free(&x);
    hyp_optim_cfg_free(&plan);
    plan_free(&plan);
    return rc;
}
