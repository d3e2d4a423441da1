/* train_main.c — the generated trainer's program (`out/NAME/train`): loads the plan that `gen`
 * wrote next to it and trains on pre-tokenized shards through the plan's backend (backend.h: the
 * cpu executor, or for --target sim and sm_XX the device layer) with the one step driver and
 * this one loop for every objective (objective.h: the next-token loss over the shards, or the
 * plan's post-training objective over gen data --pref examples), evaluates, checkpoints
 * (train_ckpt.h), resumes bit-exactly, logs metrics and samples text.
 * Progress and metrics: tokens/s per step, over a window (v2186: mean, p20/p50/p80) and the run;
 * data and communication wait per step (backend.c); MFU = the plan's model FLOPs/token (formulas.lua,
 * PaLM's convention unless v2187 says causal) x windowed tokens/s / the peak: --peak-flops, on the
 * cpu this machine's FMA peak measured at start (runtime/cpu/peak.c), on a device the plan's.
 * Never: step logic (backend.c), what an objective computes (objective.h), or anything one
 * backend does differently.
 *
 *   train --data DIR [--steps N] [--batch B] [--seq T] [--grad-accum K] [--lr X] [--seed S]
 *         [--ckpt-dir D] [--ckpt-every N] [--resume] [--metrics FILE] [--sample N]
 *         [--eval-every N] [--eval-batches N] [--temperature X] [--top-k K] [--plan FILE]
 *         [--init-from PATH] [--deadline SECONDS] [--tensorboard DIR|none] [--peak-flops X]
 *         [--profile FILE|none] [--profile-steps A:B] [--memory-profile FILE|none]
 *   train sample --ckpt-dir D [--sample N] [--prompt TEXT] [--temperature X] [--top-k K]
 *
 * Exit status: 0 done, 1 environment failure, 2 bad input (flags, data, plan, checkpoint) —
 * always with one line "where: what — how to fix"; 3 stopped early by SIGTERM/SIGINT/SIGUSR1 or
 * --deadline after a whole step, checkpoint written (--resume continues bit-exactly); 4 stopped
 * by a signal without --ckpt-dir: nothing saved (preempt.h); 5 kept diverging under the v2176
 * guard (train_guard.h): nothing to roll back to, or the rollbacks used up. Never leaves a
 * half-written checkpoint, and never saves right after a step the guard judged bad.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "ckpt.h"
#include "coll.h"
#include "data.h"
#include "exec.h"
#include "gemm_bf16.h"
#include "metrics.h"
#include "fsio.h"
#include "tboard.h"
#include "losspred.h"
#include "prune.h"
#include "async_dp.h"
#include "grad_compress.h"
#include "local_sgd.h"
#include "tokenizer.h"
#include "ops_cpu.h"
#include "peak.h"
#include "optim.h"
#include "plan.h"
#include "rng.h"
#include "backend.h"
#include "distill.h"
#include "grpo.h"
#include "pref.h"
#include "preempt.h"
#include "profile.h"
#include "progress.h"
#include "objective.h"
#include "train.h"
#include "train_ckpt.h"
#include "train_guard.h"
#include "train_stream.h"
#include "train_moe.h"
#include "train_pp.h"
#include "train_ep.h"
#include "train_tp.h"
#include "train_cp.h"

typedef struct {
    const char *data, *ckpt_dir, *metrics, *plan, *prompt, *init_from, *tensorboard;
    const char *profile, *profile_steps, *memory_profile; /* v2184, v2185 (profile.h) */
    const char *stream, *doc_sep, *tokenizer;             /* v2129 (train_stream.h) */
    int steps, batch, seq, grad_accum, ckpt_every, resume, sample, eval_every, eval_batches, top_k;
    int sample_mode, keep, stop_after, log_every;
    double lr, temperature, deadline, peak_flops;
    long long seed;
    int have_seed, have_lr;
} args_t;

static const char *FLAGS[] = {"--data", "--steps", "--batch", "--seq", "--grad-accum", "--lr", "--seed",
                              "--ckpt-dir", "--ckpt-every", "--resume", "--metrics", "--sample",
                              "--eval-every", "--eval-batches", "--temperature", "--top-k", "--plan",
                              "--prompt", "--keep", "--stop-after", "--init-from", "--deadline", "--tensorboard",
                              "--peak-flops", "--profile", "--profile-steps", "--memory-profile", "--log-every", "--help",
                              "--stream", "--doc-sep", "--tokenizer", NULL};

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
    "       train --stream FILES[,GLOB...] [--doc-sep SEP] [--tokenizer FILE|DIR] ... (v2129: raw text,\n"
    "                                .jsonl, .gz read and tokenized while training; instead of --data;\n"
    "                                --doc-sep blank (or '') splits plain text at blank lines)\n"
    "             [--ckpt-dir D] [--ckpt-every N] [--keep K] [--resume] [--metrics FILE] [--sample N]\n"
    "             [--eval-every N] [--eval-batches N] [--temperature X] [--top-k K] [--plan FILE]\n"
    "             [--init-from PATH] start from these weights (a Hugging Face model directory of\n"
    "                                GPT-2, Llama or Qwen3, or a Hyperion checkpoint of any plan of\n"
    "                                this model's shape); optimizer and schedule start fresh.\n"
    "                                With --resume, a checkpoint in --ckpt-dir wins\n"
    "             [--stop-after N]   stop (checkpointing) after N steps of this run; the LR schedule\n"
    "                                still spans --steps, so a later --resume continues it exactly\n"
    "             [--deadline S]     stop (checkpointing) before S seconds after the start: at the last\n"
    "                                step after which another step plus a checkpoint would not fit,\n"
    "                                from the measured step and checkpoint times (needs --ckpt-dir)\n"
    "             [--tensorboard DIR] TensorBoard event files in DIR (rank 0; a resumed run adds a\n"
    "                                file); 'none' turns off the plan's default (v2183: OUT/runs)\n"
    "             [--log-every N]    a log line every N steps (and at evaluations, skipped steps and\n"
    "                                the end) instead of the progress line a terminal gets by default\n"
    "             [--peak-flops X]   report MFU against X FLOP/s per rank (default: cpu — this machine's\n"
    "                                fp32 FMA peak measured at start; a GPU — the plan's hardware peak)\n"
    "             [--profile FILE]   a Chrome/Perfetto trace of steps --profile-steps A:B (default: the\n"
    "                                3 after warm-up) and a per-op table; 'none' turns off the plan's\n"
    "                                default (v2184: OUT/trace.json)\n"
    "             [--memory-profile FILE.svg] the arena timeline and peak by buffer, measured peak vs\n"
    "                                planned; 'none' turns off the plan's default (v2185: OUT/memory.svg)\n"
    "       train sample --ckpt-dir D [--sample N] [--prompt TEXT] [--temperature X] [--top-k K]\n"
    "                                [--plan FILE] (default: the checkpoint's own plan copy, else\n"
    "                                the plan beside this program)\n"
    "\n"
    "SIGTERM, SIGINT or SIGUSR1 (a preemption notice; mpirun forwards SIGUSR1 to every rank) stop the\n"
    "run after the step in flight, on every rank at the same step, and write a checkpoint to\n"
    "--ckpt-dir; further signals during the save are ignored. Exit status:\n"
    "  0  done             1  environment failure      2  bad input (flags, data, plan, checkpoint)\n"
    "  3  stopped early (signal or --deadline), checkpoint written: rerun with --resume to continue\n"
    "  4  stopped by a signal without --ckpt-dir: nothing was saved\n"
    "  5  kept diverging (v2176 guard): bad steps with no checkpoint to roll back to, or too many rollbacks\n";

static int parse_args(int argc, char **argv, args_t *a) {
    memset(a, 0, sizeof *a);
    a->temperature = 0.8;
    a->top_k = 40;
    a->keep = -1;       /* -1: the plan's checkpoint.keep (v2178), else 3 */
    a->ckpt_every = -1; /* -1: the plan's checkpoint.every, else only at the end */
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
        else if (!strcmp(f, "--stream")) a->stream = v;
        else if (!strcmp(f, "--doc-sep")) a->doc_sep = v;
        else if (!strcmp(f, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(f, "--metrics")) a->metrics = v;
        else if (!strcmp(f, "--tensorboard")) a->tensorboard = v;
        else if (!strcmp(f, "--profile")) a->profile = v;
        else if (!strcmp(f, "--profile-steps")) a->profile_steps = v;
        else if (!strcmp(f, "--memory-profile")) a->memory_profile = v;
        else if (!strcmp(f, "--plan")) a->plan = v;
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--init-from")) a->init_from = v;
        else if (!strcmp(f, "--lr")) rc = parse_num(f, v, 0, 10, &a->lr), a->have_lr = 1;
        else if (!strcmp(f, "--deadline")) rc = parse_num(f, v, 1e-3, 1e9, &a->deadline);
        else if (!strcmp(f, "--peak-flops")) rc = parse_num(f, v, 1e6, 1e20, &a->peak_flops);
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
                else if (!strcmp(f, "--log-every")) a->log_every = (int)n;
            }
        }
        if (rc) return rc;
    }
    if (!a->sample_mode && !a->data && !a->stream) {
        fprintf(stderr, "train: --data DIR (or --stream FILES, v2129) is required — prepare shards with `gen data corpus.txt -o DIR`\n");
        return HYP_EINPUT;
    }
    if (a->sample_mode && !a->ckpt_dir) {
        fprintf(stderr, "train: sample needs --ckpt-dir D — point it at a training run's checkpoint directory\n");
        return HYP_EINPUT;
    }
    if (a->sample_mode && a->init_from) {
        fprintf(stderr, "train: sample reads --ckpt-dir; --init-from is for training — drop one of them\n");
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

/* Samples n tokens after the prompt with temperature and top-k; prints text decoded with tok (the
 * data's tokenizer, v2125: the prompt is encoded with it too), else bytes for the byte tokenizer,
 * token ids otherwise. */
static int sample_text(exec_t *x, const args_t *a, hyp_tok *tok, uint64_t seed, FILE *out) {
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
    if (tok) { /* the prompt's ids (a newline without one), as the model saw text in training */
        int32_t *pids = NULL;
        size_t pn = 0, pcap = 0;
        hyp_err pe;
        const char *pr = a->prompt && *a->prompt ? a->prompt : "\n";
        if (hyp_tok_encode(tok, (const uint8_t *)pr, strlen(pr), &pids, &pn, &pcap, &pe) || (int)pn > cap - n) {
            free(pids), free(ctx), free(probs), free(idx);
            return HYP_EFAIL;
        }
        for (size_t i = 0; i < pn; i++) ctx[len++] = pids[i];
        free(pids);
    } else if (a->prompt && *a->prompt)
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
        size_t nb;
        const uint8_t *b = tok ? hyp_tok_token_bytes(tok, next, &nb) : NULL;
        if (b) fwrite(b, 1, nb, out);
        else if (is_byte) fputc(next, out);
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
    /* training stops cleanly on SIGTERM/SIGINT/SIGUSR1 (preempt.h); installed before MPI, OpenMP
     * and the data loader start threads, so that they all inherit the blocked signals and a
     * notice during setup is kept too. Sampling keeps the default actions. */
    int rc = argc > 1 && !strcmp(argv[1], "sample") ? HYP_OK : hyp_stop_install(&e);
    if (rc) {
        fprintf(stderr, "train: %s\n", e.msg);
        return rc;
    }
    rc = hyp_coll_init(&argc, &argv, &coll, &e);
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

/* Everything a run holds, so that the pieces of run() below stay small. */
typedef struct {
    args_t a;
    plan_t plan;
    char plan_path[PATH_MAX];
    dp_t d;
    hyp_coll *cp; /* v2108: the rank's context-parallel group (NULL without cp) */
    exec_t x;                   /* the host executor (the cpu backend's, or a device run's mirror) */
    train_backend be;
    train_opts opt;
    hyp_rng rng;
    hyp_loader *train, *val;
    hyp_metrics *mlog;
    hyp_tboard *tb;             /* TensorBoard events (rank 0; --tensorboard or the plan's v2183) */
    hyp_losspred *lp;           /* v2148: the losses so far and their fitted law (plan.lp_every > 0) */
    int lp_below;               /* fits in a row that expected less than lp_min_delta */
    int early_stopped;          /* v2148: the step the run stopped at early (0: it did not) */
    hyp_losspred_out lp_last;   /* the fit that stopped it */
    int tb_every;
    int B, T, K, eval_every, eval_batches, start_step;
    uint64_t seed;
    int64_t tokens_per_step;
    hyp_loader_state lstate;
    hyp_stop stop;              /* signals and --deadline (preempt.h) */
    int stopped;                /* 0, or the step after which the run stopped early */
    int stop_signal, stop_deadline, stop_saved;
    train_objective obj;        /* what the steps minimize (objective.h) */
    train_guard guard;          /* v2176: skip bad steps, roll back (train_guard.h) */
    int ls_resumed;             /* v2162: the checkpoint held a loss scaler state */
    double ls_scale;
    long long ls_good;
    hyp_progress pg;            /* the progress line on a terminal, log lines elsewhere */
    double lr0;                 /* the peak LR before any rollback lowered it */
    hyp_ckpt_async *ckpt_async; /* v2179: rank 0's background checkpoint writer (NULL: blocking) */
    double ckpt_s;              /* how long the last checkpoint held up training (metrics ckpt_s) */
    char ckpt_base[64];         /* v2180: the last full checkpoint this run saved ("" none yet) */
    int ckpt_saves;             /* saves so far in this run */
    int stop_bad;               /* stopped right after a bad step: no checkpoint written then */
    char ckpt_dir[PATH_MAX + 256]; /* the plan's checkpoint.dir resolved (v2178) */
    double peak;                /* FLOP/s per rank the MFU is against (0: none, sim) */
    char peak_desc[160];        /* where it came from, for the banner */
    train_prof prof;            /* v2184 trace / v2185 memory profile (profile.h) */
    hyp_data_tok dtok;          /* the --data directory's tokenizer (v2125; kind "" unknown) */
    char ck_tok[16], ck_tok_hash[17], ck_tok_file[PATH_MAX]; /* the loaded checkpoint's record */
} run_t;

/* The first entry of dir that a checkpoint directory of ours would not hold (NULL: none, or no dir):
 * --resume must not train from scratch into someone else's files (an HF save_pretrained dir...). */
static const char *foreign_entry(const char *dir) {
    static char name[256];
    DIR *d = opendir(dir);
    if (!d) return NULL;
    struct dirent *de;
    const char *found = NULL;
    while (!found && (de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strncmp(n, ".tmp-step_", 10)) continue;
        snprintf(name, sizeof name, "%s", n);
        found = name;
    }
    closedir(d);
    return found;
}

static int hf_like(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return access(p, F_OK) == 0;
}

/* --resume / sample: the latest checkpoint into the host executor, the RNG and loader state. */
static int resume(run_t *r, hyp_err *e) {
    hyp_ckpt_state st;
    int rc = train_ckpt_load(&r->d, &r->x, r->a.ckpt_dir, r->a.sample_mode, r->plan.state_hash, &st, e);
    if (rc == HYP_ENOCKPT && r->a.resume && !r->a.sample_mode) {
        const char *other = foreign_entry(r->a.ckpt_dir);
        if (other)
            return hyp_fail(e, HYP_EINPUT, "%s: --resume found no checkpoint of ours here, but other files (%s): refusing to train from scratch and write checkpoints into it — give an empty or new --ckpt-dir%s",
                            r->a.ckpt_dir, other, hf_like(r->a.ckpt_dir) ? ", and --init-from this directory to start from its weights" : "");
        printf("no checkpoint in %s yet: starting from step 0\n", r->a.ckpt_dir);
        return HYP_OK;
    }
    if (rc) return rc == HYP_ENOCKPT ? HYP_EINPUT : rc;
    if (st.world && st.world != (uint64_t)r->d.world && !r->plan.ckpt_elastic && !r->a.sample_mode)
        return hyp_fail(e, HYP_EINPUT, "%s: saved by %llu rank%s, resumed on %d: this trainer was generated without elastic resume — run it on %llu rank%s, or regenerate with --enable v2175 (elastic training)",
                        st.path, (unsigned long long)st.world, st.world == 1 ? "" : "s", r->d.world,
                        (unsigned long long)st.world, st.world == 1 ? "" : "s");
    snprintf(r->ck_tok, sizeof r->ck_tok, "%s", st.tokenizer);
    snprintf(r->ck_tok_hash, sizeof r->ck_tok_hash, "%s", st.tokenizer_hash);
    snprintf(r->ck_tok_file, sizeof r->ck_tok_file, "%s", st.tokenizer_file);
    /* v2125: the weights learned one tokenizer's ids; data of another would be read as noise */
    if (!r->a.sample_mode && st.tokenizer[0] && r->dtok.kind[0] &&
        (strcmp(st.tokenizer, r->dtok.kind) != 0 || strcmp(st.tokenizer_hash, r->dtok.hash) != 0))
        return hyp_fail(e, HYP_EINPUT, "%s: trained on data of tokenizer %s%s%s but --data %s was made with %s%s%s (%s) — resume on data made with the checkpoint's tokenizer (gen data --tokenizer %s), or start a new --ckpt-dir",
                        st.path, st.tokenizer, st.tokenizer_hash[0] ? " " : "", st.tokenizer_hash, r->a.data, r->dtok.kind,
                        r->dtok.hash[0] ? " " : "", r->dtok.hash, r->dtok.source[0] ? r->dtok.source : "bytes",
                        st.tokenizer_file[0] ? st.tokenizer_file : "byte");
    r->start_step = (int)st.step;
    r->ls_resumed = st.has_loss_scale, r->ls_scale = st.loss_scale, r->ls_good = (long long)st.loss_scale_good;
    if (!r->a.sample_mode) { /* schedule-free: saved x, trains at y */
        int rc = train_eval_point_dp(&r->x, r->d.opt, r->d.coll, 0, e);
        if (rc) return rc;
    }
    hyp_rng_set_state(&r->rng, st.rng);
    /* the checkpoint counts windows of the whole data-parallel group (elastic resume, v2175):
     * each of the current ranks continues at its share of them */
    r->lstate.epoch = st.loader_epoch;
    r->lstate.position = st.loader_position / (uint64_t)r->d.world;
    if (r->a.stream && !r->a.sample_mode && (rc = train_stream_restore(&r->d, &st, &r->lstate, e))) return rc;
    if (st.loader_position % (uint64_t)r->d.world)
        return hyp_fail(e, HYP_EINPUT, "%s: %llu windows of this epoch were consumed, which %d ranks cannot split evenly — resume with a world size dividing it",
                        st.path, (unsigned long long)st.loader_position, r->d.world);
    printf("resumed from %s at step %d (saved by %s; now %d rank%s)\n", st.path, r->start_step,
           st.plan[0] ? st.plan : "a trainer of this plan", r->d.world, r->d.world == 1 ? "" : "s");
    return HYP_OK;
}

/* The plan's row layout (v2126 packed rows, v2127 dynamic batches: the train split only, cpu only). */
static int rows_layout(const run_t *r, hyp_loader *L, int train, hyp_err *e) {
    if (train && r->plan.token_budget > 0) {
        if (!r->be.i->caps.dynamic_shapes)
            return hyp_fail(e, HYP_EINPUT, "dynamic batching (train.token_budget): the %s backend runs fixed batch shapes — use gen --target cpu, or drop dynamic-batching", r->be.name);
        return hyp_loader_dynamic(L, r->plan.token_budget, r->plan.buckets, e);
    }
    return r->plan.pack_max_docs > 0 ? hyp_loader_pack_rows(L, r->plan.pack_max_docs, e) : HYP_OK;
}

/* The next-token objective's data: the train split (required), the validation split (optional). */
static int open_loaders(run_t *r, hyp_err *e) {
    const args_t *a = &r->a;
    int rc;
    int lr, lw, lT; /* v2108: the dp axis reads whole rows of cp x T tokens */
    train_cp_loader_shape(&r->plan, &r->d, r->T, &lr, &lw, &lT);
    if (a->stream) rc = train_stream_open(&r->plan, &r->d, a->stream, a->doc_sep, a->tokenizer, r->B, r->T, r->seed, &r->train, e);
    else rc = hyp_loader_open_rc(a->data, "train", r->B, lT, r->seed, lr, lw, &r->train, e);
    if (!rc && a->stream && r->plan.token_budget > 0)
        rc = hyp_fail(e, HYP_EINPUT, "--stream: dynamic batching (v2127) groups documents by length over the whole split — train from gen data shards (--data), or regenerate without dynamic-batching");
    if (!rc && a->stream && r->plan.pack_max_docs > 0)
        printf("note: --stream cuts rows as contiguous T-token windows with document masks; best-fit packing of whole documents (v2126 rows=best-fit) needs the whole split — use --data shards for it\n");
    if (rc || (rc = hyp_loader_require_vocab(r->train, r->plan.V, e)) || (!a->stream && (rc = rows_layout(r, r->train, 1, e))) ||
        (rc = hyp_loader_set_state(r->train, &r->lstate, e)))
        return rc;
    /* v2128: the plan's prefetch depth (the batches are the same either way) */
    if (r->plan.prefetch > 0 && (rc = hyp_loader_prefetch(r->train, r->plan.prefetch, e))) return rc;
    /* v2129: a stream always reads and tokenizes in the loader thread */
    if (a->stream && !r->plan.prefetch && (rc = hyp_loader_prefetch(r->train, 2, e))) return rc;
    if (a->stream && r->eval_every > 0 && r->eval_batches > 0)
        printf("note: --stream has no validation split; validation is off\n");
    else if (r->eval_every > 0 && r->eval_batches > 0) {
        hyp_err ve;
        if (hyp_loader_open_rc(a->data, "val", r->B, lT, r->seed, lr, lw, &r->val, &ve) == HYP_OK &&
            (rc = rows_layout(r, r->val, 0, &ve)) != HYP_OK) { /* too few documents for one packed row per rank */
            hyp_loader_close(r->val);
            r->val = NULL;
            printf("note: validation is off: %s\n", ve.msg);
            rc = HYP_OK;
        } else if (r->val)
            rc = hyp_loader_require_vocab(r->val, r->plan.V, e);
        else
            printf("note: no validation split in %s (%s); validation is off\n", a->data, ve.msg);
        if (rc) return rc;
    }
    return train_objective_tokens(&r->obj, r->train, r->val, r->eval_batches, a->stream != NULL, &r->d, e);
}

/* The metrics log and TensorBoard's events (rank 0). */
static int open_logs(run_t *r, hyp_err *e) {
    const args_t *a = &r->a;
    int rc = HYP_OK;
    int rank0 = r->d.rank == 0 && r->d.tp_rank == 0; /* v2106: of the world, not only the dp axis */
    if (rank0 && a->metrics) rc = hyp_metrics_open(&r->mlog, a->metrics, r->start_step > 0, e);
    if (rc || !rank0) return rc;
    /* TensorBoard: --tensorboard DIR, else the plan's section (v2183) beside plan.json */
    char dir[PATH_MAX + 256];
    r->tb_every = a->tensorboard || !r->plan.tb_logdir[0] ? 1 : r->plan.tb_every;
    if (a->tensorboard && !strcmp(a->tensorboard, "none")) return HYP_OK;
    if (a->tensorboard) snprintf(dir, sizeof dir, "%s", a->tensorboard);
    else if (r->plan.tb_logdir[0] == '/') snprintf(dir, sizeof dir, "%s", r->plan.tb_logdir);
    else if (r->plan.tb_logdir[0]) {
        char pd[PATH_MAX];
        hyp_fs_dirname(r->plan_path, pd, sizeof pd);
        snprintf(dir, sizeof dir, "%s/%s", pd, r->plan.tb_logdir);
    } else return HYP_OK;
    if (!(rc = hyp_tboard_open(&r->tb, dir, r->start_step > 0, e)))
        printf("tensorboard: %s (every %d step%s)\n", hyp_tboard_path(r->tb), r->tb_every, r->tb_every == 1 ? "" : "s");
    return rc;
}

/* The MFU denominator (v2187): --peak-flops; on the cpu this machine's fp32 FMA peak measured
 * now with the threads the run uses (a figure from another machine would be off by the ratio of
 * the two); on a device the plan's hardware peak for the dtype the GEMMs run in. */
static void choose_peak(run_t *r) {
    const plan_t *p = &r->plan;
    int threads = omp_get_max_threads();
    if (r->a.peak_flops > 0) {
        r->peak = r->a.peak_flops;
        snprintf(r->peak_desc, sizeof r->peak_desc, "peak %.1f GFLOP/s from --peak-flops", r->peak * 1e-9);
    } else if (r->be.i->caps.host_compute) {
        int width = 0, bf16 = !strcmp(p->peak_dtype, "bf16");
        double t0 = now_s();
        /* v2102 bf16 GEMMs: the best of oneDNN bf16 matmuls on this machine (gemm_bf16.h) */
        r->peak = bf16 ? gemm_bf16_peak(0.3) : hyp_cpu_fma_peak(threads, 0.08, &width);
        /* ranks sharing this host (mpirun sets the local size) with more threads than cores: each
         * rank's share of the cores, not the peak of threads that would each own one */
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        int local = ls ? atoi(ls) : 1;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        double share = 1;
        if (local > 1 && cores > 0 && (long)local * threads > cores) share = (double)cores / ((double)local * threads);
        r->peak *= share;
        char shared[64] = "";
        if (share < 1) snprintf(shared, sizeof shared, ", x %.2f: %d ranks on %ld cores", share, local, cores);
        if (bf16)
            snprintf(r->peak_desc, sizeof r->peak_desc,
                     "peak %.1f GFLOP/s bf16 measured at start (oneDNN bf16 matmul 1536^3, %d thread%s, %.0f ms%s)",
                     r->peak * 1e-9, threads, threads == 1 ? "" : "s", 1e3 * (now_s() - t0), shared);
        else
            snprintf(r->peak_desc, sizeof r->peak_desc,
                     "peak %.1f GFLOP/s fp32 measured at start (%d-wide FMA, %d thread%s, %.0f ms%s)", r->peak * 1e-9,
                     width, threads, threads == 1 ? "" : "s", 1e3 * (now_s() - t0), shared);
    } else if (p->peak_flops > 0) {
        r->peak = p->peak_flops;
        snprintf(r->peak_desc, sizeof r->peak_desc, "peak %.1f TFLOP/s %s from specs/hardware/%s.yaml", r->peak * 1e-12,
                 p->peak_dtype[0] ? p->peak_dtype : "fp32", p->hardware);
    } else {
        r->peak = 0;
        snprintf(r->peak_desc, sizeof r->peak_desc, "no peak for target %s (give --peak-flops)", p->target);
    }
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentiles of the window's per-step tokens/s (v2186): q[0..2] = p20, p50, p80 (nearest rank).
 * tmp holds n doubles. */
static void window_percentiles(const double *dt, int n, double tokens, double *tmp, double q[3]) {
    memcpy(tmp, dt, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_dbl); /* step times ascending: tokens/s descending */
    static const double P[3] = {0.2, 0.5, 0.8};
    for (int i = 0; i < 3; i++) {
        int k = (int)((1.0 - P[i]) * (n - 1) + 0.5);
        q[i] = tokens / tmp[k];
    }
}

static void print_banner(run_t *r, hyp_err *e) {
    const plan_t *p = &r->plan;
    printf("hyperion trainer: model %s (%s, %.2fM params) | target %s | plan %s\n", p->model_name, p->arch,
           p->n_params / 1e6, p->target, p->hash);
    printf("batch %d x seq %d x accum %d x ranks %d = %lld tokens/step | %d threads/rank | activations %.1f MiB (%.1f MiB without the memory plan)\n",
           r->B, r->T, r->K, r->d.world, (long long)r->tokens_per_step, omp_get_max_threads(), 4.0 * p->act_floats / 1048576.0,
           4.0 * p->act_floats_unplanned / 1048576.0);
    train_print_memory(&r->be, e); /* a device run: the device's arenas (the host mirror only stages) */
    r->obj.i->describe(&r->obj, stdout);
    printf("schedule: %s%ssteps %d | lr %.3g (%s, warmup %d) | clip %g | wd %g\n", r->obj.label, r->obj.label[0] ? " " : "",
           r->opt.total_steps, r->opt.lr, r->opt.schedule, r->opt.warmup_steps, r->opt.max_norm, max_weight_decay(&p->optim));
    if (r->train && r->a.stream)
        printf("data: streaming %s (v2129): tokenizer %s, shuffle blocks of %d rows, documents dealt to %d rank%s, read in the loader thread (prefetch %d)%s\n",
               r->a.stream, r->a.tokenizer ? r->a.tokenizer : "byte", p->stream_buffer, r->d.world, r->d.world == 1 ? "" : "s",
               hyp_loader_prefetch_depth(r->train), p->positions_buf >= 0 ? ", attention masked per document (packing)" : "");
    else if (r->train && (p->positions_buf >= 0 || hyp_loader_has_docs(r->train) || p->prefetch > 0))
        printf("data: %llu documents (.docs sidecars)%s | prefetch %d\n", (unsigned long long)hyp_loader_num_docs(r->train),
               p->positions_buf < 0 ? ", not used: this trainer has no document mask (packing)"
               : hyp_loader_has_docs(r->train) ? ", attention masked per document (packing)"
                                               : ", none: one stream, plain causal attention",
               p->prefetch);
    printf("MFU: %.3g model FLOPs/token at T=%d (%s) | %s | tok/s window %d steps\n",
           p->flops_per_token - p->flops_attn_coef * (p->T - r->T), r->T, p->flops_convention, r->peak_desc,
           p->metrics_window);
    fflush(stdout);
}

/* The checkpoint of step `step`: the backend's state into the host executor, then saved. */
static int save_checkpoint(run_t *r, int step, hyp_err *e) {
    int rc = train_sync_host(&r->be, e);
    if (rc) return rc;
    hyp_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = (uint64_t)step;
    st.tokens_seen = (uint64_t)step * (uint64_t)r->tokens_per_step;
    hyp_rng_get_state(&r->rng, st.rng);
    st.world = (uint64_t)r->d.world;
    /* the objective's data position and the files it keeps beside the checkpoints */
    if ((rc = r->obj.i->ckpt_save(&r->obj, &r->be, &st, r->a.ckpt_dir, e))) return rc;
    snprintf(st.config_hash, sizeof st.config_hash, "%s", r->plan.state_hash);
    snprintf(st.plan, sizeof st.plan, "%s on %d rank%s, ZeRO stage %d", r->plan.model_name, r->d.world,
             r->d.world == 1 ? "" : "s", r->plan.zero_stage);
    if (r->plan.tp) /* v2106: the mesh it was trained on (the tensors are whole, the np=1 layout) */
        snprintf(st.plan + strlen(st.plan), sizeof st.plan - strlen(st.plan), ", x tp %d (consolidated)", r->plan.tp);
    snprintf(st.tokenizer, sizeof st.tokenizer, "%s", r->dtok.kind);
    snprintf(st.tokenizer_hash, sizeof st.tokenizer_hash, "%s", r->dtok.hash);
    snprintf(st.tokenizer_file, sizeof st.tokenizer_file, "%s", r->dtok.file);
    if (r->be.ls.on) { /* v2162: the scaler's state, for a bit-exact resume */
        st.has_loss_scale = 1;
        st.loss_scale = r->be.ls.scale;
        st.loss_scale_good = (uint64_t)r->be.ls.good;
    }
    if ((rc = train_eval_point_dp(&r->x, r->d.opt, r->d.coll, 1, e))) return rc; /* schedule-free: the checkpoint holds the average x */
    /* v2180: every full_every-th save of this run is full (the first one too), the others deltas */
    int fe = r->plan.ckpt_full_every, full = !fe || train_ckpt_sharded(&r->d) || !r->ckpt_base[0] || r->ckpt_saves % fe == 0;
    char base[64];
    snprintf(base, sizeof base, "%s", full ? "" : r->ckpt_base);
    if (full) snprintf(r->ckpt_base, sizeof r->ckpt_base, "step_%08d", step);
    r->ckpt_saves = full ? 1 : r->ckpt_saves + 1;
    rc = train_ckpt_save_async(&r->d, &r->x, r->a.ckpt_dir, r->a.keep, &st, r->ckpt_async, base, e);
    int rc2 = train_eval_point_dp(&r->x, r->d.opt, r->d.coll, 0, e);
    return rc ? rc : rc2;
}

/* v2179: until rank 0's background writes are on disk (every rank waits for rank 0). */
static int ckpt_drain(run_t *r, hyp_err *e) {
    int rc = hyp_ckpt_async_wait(r->ckpt_async, e);
    if (r->d.world > 1 && !hyp_coll_all_ok(r->d.coll, rc == 0) && !rc)
        rc = hyp_fail(e, HYP_EFAIL, "rank 0 failed to write a checkpoint in the background (its message is above)");
    return rc;
}

/* What a run that stopped early says: which step, why, where its checkpoint is. */
static void report_stop(run_t *r, int done_steps, double secs) {
    int sig = hyp_stop_signal();
    char why[96];
    if (r->stop_signal && sig) snprintf(why, sizeof why, "%s", hyp_stop_signal_name(sig));
    else if (r->stop_signal) snprintf(why, sizeof why, "a signal to another rank");
    else snprintf(why, sizeof why, "--deadline %.0f s", r->a.deadline);
    if (r->stop_bad) {
        printf("stopped by %s after step %d, a bad step (v2176): no checkpoint written; --resume continues from the last good one in %s\n",
               why, r->stopped, r->a.ckpt_dir);
        fflush(stdout);
        return;
    }
    if (!r->stop_saved) {
        fprintf(stderr, "train: stopped by %s after step %d: no --ckpt-dir was given, so nothing was saved — pass --ckpt-dir D to make a run resumable\n",
                why, r->stopped);
        return;
    }
    printf("stopped by %s after step %d (%d steps in %.1f s): checkpoint %s/step_%08d written in %.2f s — continue with --resume\n",
           why, r->stopped, done_steps, secs, r->a.ckpt_dir, r->stopped, r->stop.ckpt_last);
    if (sig && hyp_stop_notice_time() > 0) {
        double since = hyp_stop_now() - hyp_stop_notice_time();
        printf("preemption: %s received %.2f s ago", hyp_stop_signal_name(sig), since);
        if (hyp_stop_signal_count() > 1) printf("; %d later signals were ignored", hyp_stop_signal_count() - 1);
        if (r->plan.preempt)
            printf("; %s the plan's grace_seconds %.0f", since <= r->plan.preempt_grace_s ? "within" : "OVER",
                   r->plan.preempt_grace_s);
        printf("\n");
    }
    fflush(stdout);
}

/* Should the run stop after this step? A signal on any rank, or a --deadline that another step
 * plus a checkpoint would overrun; under mpirun an all-reduce (max) of both, once per step, so
 * every rank stops after the same step. */
static int agree_stop(run_t *r, int *by_signal, int *by_deadline, int *early, hyp_err *e) {
    float v[3] = {hyp_stop_signal() ? 1.0f : 0.0f, hyp_stop_deadline_near(&r->stop, hyp_stop_now()) ? 1.0f : 0.0f,
                  *early ? 1.0f : 0.0f};
    hyp_coll *all = r->d.all ? r->d.all : r->d.coll; /* v2106: every rank of the mesh */
    if (hyp_coll_world(all) > 1) {
        int rc = hyp_coll_allreduce_max_f32(all, v, 3, e);
        if (rc) return rc;
    }
    *by_signal = v[0] > 0, *by_deadline = v[1] > 0, *early = v[2] > 0;
    return HYP_OK;
}

/* A preemptible trainer (plan.preempt, v2177): says once when a step plus a checkpoint would not
 * fit the scheduler's grace time, so a notice could not be honoured. */
static void check_grace(run_t *r, int *warned) {
    double need = r->stop.step_max + hyp_stop_ckpt_estimate(&r->stop);
    if (!r->plan.preempt || *warned || need <= r->plan.preempt_grace_s) return;
    *warned = 1;
    fprintf(stderr, "train: warning: a step (%.2f s) plus a checkpoint (%s%.2f s) take %.2f s, more than the plan's grace_seconds %.0f: a preemption notice may come too late to save — shorten the step (--batch, --grad-accum) or regenerate with a larger --set v2177.grace_seconds\n",
            r->stop.step_max, r->stop.ckpt_last > 0 ? "" : "~", hyp_stop_ckpt_estimate(&r->stop), need,
            r->plan.preempt_grace_s);
}

/* v2176: back to the last good checkpoint (weights, optimizer, RNG, data position) with the LR
 * times lr_factor; *step becomes its step (the loop goes on from the next). Exit status 5 when
 * there is nothing to roll back to or the rollbacks are used up. */
static int rollback(run_t *r, int at, int *step, hyp_err *e) {
    train_guard *tg = &r->guard;
    const hyp_guard_cfg *c = &tg->g.cfg;
    int ok = hyp_guard_rolled_back(&tg->g);
    if (!r->a.ckpt_dir)
        return hyp_fail(e, HYP_EXIT_DIVERGED, "step %d: %d bad steps in a row (last: %s) and no --ckpt-dir to roll back to — lower --lr (now %.3g), or pass --ckpt-dir D --ckpt-every N",
                        at, c->max_bad, tg->reason, r->opt.lr);
    if (!ok)
        return hyp_fail(e, HYP_EXIT_DIVERGED, "step %d: still diverging after %d rollbacks (last: %s) — lower --lr (now %.3g) or check the data; the last good checkpoint is in %s",
                        at, c->max_rollbacks, tg->reason, r->opt.lr, r->a.ckpt_dir);
    hyp_ckpt_state st;
    int rc = ckpt_drain(r, e);
    if (rc) return rc;
    rc = train_ckpt_load(&r->d, &r->x, r->a.ckpt_dir, 0, r->plan.state_hash, &st, e);
    if (rc == HYP_ENOCKPT)
        return hyp_fail(e, HYP_EXIT_DIVERGED, "step %d: %d bad steps in a row (last: %s) and no checkpoint in %s yet to roll back to — checkpoint more often (--ckpt-every) or lower --lr",
                        at, c->max_bad, tg->reason, r->a.ckpt_dir);
    if (rc) return rc;
    if (!r->be.i->caps.host_buffers) { /* a device backend uploads the host's state when it opens */
        struct train_local_sgd *lsgd = r->be.lsgd; /* v2173's state outlives the device (rebased below) */
        train_backend_close(&r->be);
        rc = train_backend_open(&r->be, &r->plan, r->plan_path, &r->x, &r->d, r->B, r->T, e);
        r->be.lsgd = lsgd; /* closed at exit either way */
        if (rc) return rc;
        train_guard_attach(tg, &r->be);
    }
    hyp_rng_set_state(&r->rng, st.rng);
    if (r->be.lsgd) train_local_sgd_rebase(r->be.lsgd, &r->x); /* v2173: the loaded point is the new anchor */
    if (r->be.ls.on && st.has_loss_scale) r->be.ls.scale = st.loss_scale, r->be.ls.good = (long long)st.loss_scale_good;
    if ((rc = r->obj.i->ckpt_restore(&r->obj, &st, r->d.world, e))) return rc;
    r->opt.lr = r->lr0 * tg->g.lr_scale;
    hyp_progress_break(&r->pg);
    printf("rollback %lld of at most %d: %d bad steps in a row up to step %d (last: %s): back to %s (step %llu), lr x %g = %.3g\n",
           (long long)tg->g.rollbacks, c->max_rollbacks, c->max_bad, at, tg->reason, st.path,
           (unsigned long long)st.step, tg->g.lr_scale, r->opt.lr);
    fflush(stdout);
    *step = (int)st.step;
    return HYP_OK;
}

/* v2162: the plan's dynamic loss scaler into the backend (the checkpoint's state when resumed). */
static int loss_scale_open(run_t *r, hyp_err *e) {
    const plan_t *p = &r->plan;
    train_loss_scaler *ls = &r->be.ls;
    memset(ls, 0, sizeof *ls);
    if (!p->loss_scale) return HYP_OK;
    if (!r->be.i->caps.host_buffers && !r->be.i->ls_check) /* neither host gradients to check nor its own check */
        return hyp_fail(e, HYP_EINPUT, "%s: loss_scale (v2162): the %s backend has no loss scaler — regenerate with --target cpu",
                        r->plan_path, r->be.name);
    ls->on = 1;
    ls->scale = r->ls_resumed ? r->ls_scale : p->ls_init;
    ls->good = r->ls_resumed ? r->ls_good : 0;
    ls->growth = p->ls_growth, ls->backoff = p->ls_backoff, ls->interval = p->ls_interval;
    return HYP_OK;
}

/* At most this many scalars of the objective's own per step (objective.h metrics). */
#define OBJ_METRICS 16

/* The training loop: steps, progress lines, metrics, evaluation, checkpoints; stops early after a
 * whole step on a signal or before --deadline (preempt.h). */
static int train_loop(run_t *r, hyp_err *e) {
    const plan_t *p = &r->plan;
    const args_t *a = &r->a;
    double t_start = now_s(), tok_s = 0;
    double fpt = p->flops_per_token; /* at the planned T; attention part scales with T */
    int steps_timed = 0, done_steps = 0, rc = HYP_OK, grace_warned = 0, ckpt_deferred = 0;
    double comm_bytes = 0, comm_calls = 0; /* the steps' data-parallel traffic (v2173's measure) */
    double grad_comm[2] = {0, 0}; /* v2168: the gradient all-reduce's total and exposed seconds, steps after the warm-up */
    int grad_comm_n = 0;
    /* v2186: the last `window` timed steps' times, a ring; tokens/s over them = tokens / time */
    int W = p->metrics_window, wn = 0, wpos = 0;
    double *wdt = calloc((size_t)W * 2, sizeof *wdt), wsum = 0, q[3] = {0, 0, 0};
    if (!wdt) return hyp_fail(e, HYP_EFAIL, "out of memory for the tokens/s window (%d steps)", W);
    float last_loss = NAN;
    int last_step = r->opt.total_steps;
    if (a->stop_after > 0 && r->start_step + a->stop_after < last_step) last_step = r->start_step + a->stop_after;
    train_objective *ob = &r->obj;
    int eval_on = ob->has_eval && r->eval_every > 0;
    if (eval_on && ob->eval_at_start) { /* the starting weights (the preference objectives' reference point) */
        float v0 = NAN;
        if ((rc = ob->i->eval(ob, &r->be, r->start_step, &v0, e))) {
            free(wdt);
            return rc;
        }
    }
    for (int step = r->start_step + 1; step <= last_step && rc == 0; step++) {
        if ((rc = train_prof_step_begin(&r->prof, &r->be, step, r->start_step, last_step, e))) break;
        double t0 = now_s(), loss = 0, norm = 0, lr = train_lr_at(&r->opt, step);
        float scale = 1;
        train_step_times tm = {0};
        int skipped = 0, warn = 0;
        double ls_used = r->be.ls.scale; /* v2162: the scale this step ran under */
        r->x.fp16_flushed = r->x.fp16_nonzero = 0;
        if ((rc = train_step(&r->be, ob, &r->opt, r->K, step, lr, &loss, &norm, &scale, &tm, &skipped, e)))
            break;
        int ovf = r->be.ls.on && r->be.ls.skipped; /* a loss-scale overflow: not the guard's skip */
        comm_bytes += tm.comm_bytes, comm_calls += tm.comm_calls;
        if (tm.comm_measured && step > r->start_step + p->metrics_skip)
            grad_comm[0] += tm.comm_total_s, grad_comm[1] += tm.comm_exposed_s, grad_comm_n++;
        if (ovf) skipped = 0;
        double dt = now_s() - t0;
        if ((rc = train_prof_step_end(&r->prof, &r->be, step, dt, e))) break;
        last_loss = (float)loss;
        int roll = ovf ? 0 : train_guard_after(&r->guard, loss, norm, skipped, &warn);
        if (warn) hyp_progress_break(&r->pg);
        if (warn)
            fprintf(stderr, "train: warning: step %d: the loss %.4g is above %.3g x ln(vocab) = %.4g, worse than guessing uniformly: the run is diverging — lower --lr, or regenerate with --enable fault-tolerance (v2176) to skip such steps and roll back\n",
                    step, loss, r->guard.g.cfg.loss_ceiling, r->guard.g.ceiling);
        if (!isfinite(loss) && !r->guard.active) {
            rc = hyp_fail(e, HYP_EFAIL, "step %d: the loss is %f — lower --lr or enable clipping (--enable clip)", step, loss);
            break;
        }
        double tps = r->tokens_per_step / dt;
        if (step > r->start_step + p->metrics_skip) { /* warm-up steps stay out of the averages */
            tok_s += tps;
            steps_timed++;
            if (wn == W) wsum -= wdt[wpos];
            else wn++;
            wdt[wpos] = dt, wsum += dt, wpos = (wpos + 1) % W;
        }
        double avg_tps = steps_timed ? tok_s / steps_timed : tps;
        double win_tps = wn ? wn * (double)r->tokens_per_step / wsum : tps;
        if (wn) window_percentiles(wdt, wn, (double)r->tokens_per_step, wdt + W, q);
        else q[0] = q[1] = q[2] = tps;
        /* model FLOP/s of this rank over the window (the MFU of one noisy step is not a figure) */
        double flops = (fpt - p->flops_attn_coef * p->T + p->flops_attn_coef * r->T) * win_tps / r->d.world;
        double mfu_v = r->peak > 0 ? flops / r->peak : NAN;
        char eta[32];
        fmt_eta((last_step - step) * r->tokens_per_step / avg_tps, eta, sizeof eta);
        /* v2148: the loss curve so far fitted every fit_every steps; early stop after patience fits
         * that expect less than min_delta from the remaining steps (agreed across ranks below) */
        hyp_losspred_out lpo = {0};
        int early = 0;
        if (r->lp) {
            char lnum[64]; /* the loss as the metrics file holds it, so a resumed run's history reads back identical */
            hyp_metrics_fmt_number(loss, lnum, sizeof lnum);
            hyp_losspred_add(r->lp, step, strtod(lnum, NULL));
            if (step % p->lp_every == 0 && step < r->opt.total_steps) {
                hyp_losspred_fit(r->lp, step, r->opt.total_steps, r->opt.warmup_steps, &lpo);
                if (lpo.ok) {
                    r->lp_below = lpo.remaining < p->lp_min_delta ? r->lp_below + 1 : 0;
                    early = p->lp_stop && r->lp_below >= p->lp_patience;
                    if (early) r->lp_last = lpo;
                }
            }
        }
        if (r->be.prune && train_prune_last_update(r->be.prune) == step) { /* v2154/v2156 */
            hyp_progress_break(&r->pg);
            printf("pruning at step %d: sparsity %.4f of %lld prunable weights (schedule's target %.4f)\n", step,
                   train_prune_sparsity(r->be.prune), train_prune_weights(r->be.prune), train_prune_target(r->be.prune, step));
        }
        float vl = NAN;
        int do_eval = eval_on && (step % r->eval_every == 0 || step == last_step);
        if (do_eval && (rc = ob->i->eval(ob, &r->be, step, &vl, e))) break;
        char words[512] = ""; /* the objective's own figures of the step */
        if (ob->i->line) ob->i->line(ob, words, sizeof words);
        char mfu[16] = "  n/a"; /* no peak for the target (sim) */
        if (r->peak > 0) snprintf(mfu, sizeof mfu, "%5.1f%%", 100.0 * mfu_v);
        int log_line = hyp_progress_log_due(&r->pg, step, do_eval || skipped || ovf || step == last_step);
        if (log_line) hyp_progress_break(&r->pg);
        if (log_line) printf("step %5d/%d | %s%sloss %.4f%s | lr %.2e | norm %.3f%s | %7.0f tok/s (last %d: %.0f, p50 %.0f; mean %.0f) | data %.1f ms",
               step, r->opt.total_steps, ob->label, ob->label[0] ? " " : "", loss, words, lr, norm, scale < 1 ? " (clipped)" : "", tps, wn, win_tps, q[1], avg_tps,
               1e3 * tm.data_s);
        if (log_line) {
            if (r->d.world > 1) printf(" | comm %.1f ms", 1e3 * tm.comm_s);
            printf(" | MFU %s | ETA %s", mfu, eta);
            if (do_eval && isfinite(vl)) printf(" | val %.4f", vl);
            if (skipped) printf(" | SKIPPED: %s", r->guard.reason);
            if (ovf) printf(" | SKIPPED: inf/NaN gradients at loss scale %g, now %g", ls_used, r->be.ls.scale);
            if (r->guard.g.skipped || r->guard.g.rollbacks)
                printf(" | skipped %lld, rollbacks %lld", (long long)r->guard.g.skipped, (long long)r->guard.g.rollbacks);
            printf("\n");
            fflush(stdout);
        }
        if (lpo.ok) {
            hyp_progress_break(&r->pg);
            printf("loss prediction (v2148) at step %d: final loss (step %d) %.4f [%.4f, %.4f] (80%% band), %.4f below now (%.4f); ",
                   step, r->opt.total_steps, lpo.final, lpo.lo, lpo.hi, lpo.remaining, lpo.now);
            if (lpo.law == HYP_LAW_LR_ANNEALING)
                printf("L = %.4g + %.4g S1^-%.3f - %.4g S2 (LR areas)", lpo.E, lpo.A, lpo.alpha, lpo.C);
            else
                printf("L(t) = %.4g + %.4g t^-%.3f", lpo.E, lpo.A, lpo.alpha);
            printf(" over steps %d-%d\n", lpo.first_step, step);
            fflush(stdout);
        }
        hyp_progress_bar(&r->pg, step, r->opt.total_steps, loss, win_tps, eta, 0);
        hyp_metric_kv *moe_kv = NULL; /* the step's router statistics (train_moe.h): collective, every rank */
        int n_moe = 0;
        if ((rc = train_moe_take(&r->x, r->d.coll, r->d.world, &moe_kv, &n_moe, e))) break;
        if (r->mlog) {
            hyp_metric_kv kv[] = {{"tokens_per_s_window", win_tps}, {"tokens_per_s_p20", q[0]},
                                  {"tokens_per_s_p50", q[1]}, {"tokens_per_s_p80", q[2]}, {"tokens_per_s_mean", avg_tps},
                                  {"tokens_seen", (double)step * (double)r->tokens_per_step}, /* all ranks: the D of a scaling fit */
                                  {"step_s", dt}, {"data_wait_s", tm.data_s}, {"comm_wait_s", tm.comm_s},
                                  {"mfu", mfu_v}, {"ckpt_s", r->ckpt_s}, {"skipped", skipped},
                                  {"skipped_steps", (double)r->guard.g.skipped}, {"rollbacks", (double)r->guard.g.rollbacks}};
            int n_kv = (int)(sizeof kv / sizeof kv[0]) - (r->guard.active || r->guard.f.n ? 0 : 3);
            hyp_metric_kv kv2[sizeof kv / sizeof kv[0] + 3];
            memcpy(kv2, kv, sizeof kv);
            if (r->be.ls.on) { /* v2162: the scale this step ran under, whether it overflowed, the total */
                kv2[n_kv++] = (hyp_metric_kv){"loss_scale", ls_used};
                kv2[n_kv++] = (hyp_metric_kv){"skipped_overflow", ovf};
                kv2[n_kv++] = (hyp_metric_kv){"overflow_steps", (double)r->be.ls.overflows};
            }
            hyp_metric_kv kv3[sizeof kv2 / sizeof kv2[0] + 16 + OBJ_METRICS];
            memcpy(kv3, kv2, sizeof kv2);
            if (r->x.fp16_nonzero) /* v2102 fp16: the share of nonzero GEMM operands this step that underflowed */
                kv3[n_kv++] = (hyp_metric_kv){"fp16_flush_frac", (double)r->x.fp16_flushed / (double)r->x.fp16_nonzero};
            if (r->train && (hyp_loader_rows_mode(r->train) || p->positions_buf >= 0)) { /* v2126 / v2127: this rank's batch shape and padding */
                kv3[n_kv++] = (hyp_metric_kv){"batch_tokens", tm.slots};
                kv3[n_kv++] = (hyp_metric_kv){"batch_rows", tm.rows};
                kv3[n_kv++] = (hyp_metric_kv){"pad_frac", tm.slots > 0 ? tm.pad / tm.slots : 0};
                kv3[n_kv++] = (hyp_metric_kv){"loss_tokens", tm.loss_tokens};
                kv3[n_kv++] = (hyp_metric_kv){"loss_tokens_per_s", tm.loss_tokens / dt};
            }
            if (r->be.prune) kv3[n_kv++] = (hyp_metric_kv){"sparsity", train_prune_sparsity(r->be.prune)}; /* v2154 */
            if (r->d.world > 1) { /* the step's traffic on the data-parallel communicator (ring model) */
                kv3[n_kv++] = (hyp_metric_kv){"comm_bytes", tm.comm_bytes};
                kv3[n_kv++] = (hyp_metric_kv){"comm_calls", tm.comm_calls};
            }
            if (r->d.world > 1 && tm.comm_measured) { /* v2168: the gradient all-reduce, hidden under backward or waited for */
                kv3[n_kv++] = (hyp_metric_kv){"grad_comm_total_s", tm.comm_total_s};
                kv3[n_kv++] = (hyp_metric_kv){"grad_comm_exposed_s", tm.comm_exposed_s};
                kv3[n_kv++] = (hyp_metric_kv){"grad_comm_hidden_s", tm.comm_total_s > tm.comm_exposed_s ? tm.comm_total_s - tm.comm_exposed_s : 0};
            }
            if (lpo.ok) { /* v2148 */
                kv3[n_kv++] = (hyp_metric_kv){"pred_final_loss", lpo.final};
                kv3[n_kv++] = (hyp_metric_kv){"pred_final_lo", lpo.lo};
                kv3[n_kv++] = (hyp_metric_kv){"pred_final_hi", lpo.hi};
                kv3[n_kv++] = (hyp_metric_kv){"pred_remaining", lpo.remaining};
                if (early) kv3[n_kv++] = (hyp_metric_kv){"early_stop", 1};
            }
            if (ob->i->metrics) n_kv += ob->i->metrics(ob, kv3 + n_kv, OBJ_METRICS); /* the objective's own */
            hyp_metric_kv *all = n_moe ? malloc(sizeof *all * (size_t)(n_kv + n_moe)) : kv3;
            if (!all) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
            if (n_moe && all) memcpy(all, kv3, sizeof *all * (size_t)n_kv), memcpy(all + n_kv, moe_kv, sizeof *all * (size_t)n_moe);
            hyp_metrics_row row = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens_per_s = tps,
                                   .val_loss = do_eval ? vl : NAN, .extra = all, .n_extra = n_kv + n_moe};
            if (all && !rc) rc = hyp_metrics_write(r->mlog, &row, e);
            if (all != kv3) free(all);
        }
        free(moe_kv);
        if (rc) break;
        if (r->tb && (step % r->tb_every == 0 || step == last_step || do_eval)) {
            struct rusage ru;
            double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1024.0 : NAN; /* KiB -> MiB */
            hyp_metric_kv kv[7 + OBJ_METRICS] = {{"train/loss", loss}, {"train/lr", lr}, {"train/grad_norm", norm},
                                  {"perf/tokens_per_s", tps},
                                  {"perf/mfu", p->peak_flops > 0 ? flops / p->peak_flops : NAN},
                                  {"memory/peak_rss_mib", rss}, {"val/loss", do_eval ? vl : NAN}};
            /* the objective's scalars: val_NAME as val/NAME, the others as train/NAME */
            hyp_metric_kv okv[OBJ_METRICS];
            char tags[OBJ_METRICS][64];
            int n_tb = 7, n_ob = ob->i->metrics ? ob->i->metrics(ob, okv, OBJ_METRICS) : 0;
            for (int i = 0; i < n_ob; i++) {
                int val = !strncmp(okv[i].key, "val_", 4);
                snprintf(tags[i], sizeof tags[i], "%s/%s", val ? "val" : "train", okv[i].key + (val ? 4 : 0));
                kv[n_tb++] = (hyp_metric_kv){tags[i], okv[i].value};
            }
            if ((rc = hyp_tboard_scalars(r->tb, (uint64_t)step, kv, n_tb, e))) break;
        }
        done_steps++;
        if (roll) { /* v2176: max_bad_steps bad steps in a row */
            if ((rc = rollback(r, step, &step, e))) break;
            continue;
        }
        hyp_stop_note_step(&r->stop, now_s() - t0); /* the whole iteration: step, eval, logs */
        int by_signal = 0, by_deadline = 0;
        if (step < last_step && (rc = agree_stop(r, &by_signal, &by_deadline, &early, e))) break;
        int stop = by_signal || by_deadline || early;
        int due = a->ckpt_dir && ((a->ckpt_every && step % a->ckpt_every == 0) || step == last_step || stop);
        if ((due || ckpt_deferred) && train_guard_bad(&r->guard)) { /* never save a state the guard doubts */
            if (due) hyp_progress_break(&r->pg);
            if (due) printf("checkpoint of step %d deferred: the step was bad (%s); the last good one stays latest\n", step, r->guard.reason);
            ckpt_deferred = !stop && step < last_step;
            r->stop_bad = stop;
        } else if (due || (ckpt_deferred && a->ckpt_dir)) {
            ckpt_deferred = 0;
            double tc = now_s(), pc = hyp_prof_t();
            if ((rc = save_checkpoint(r, step, e))) break;
            r->ckpt_s = now_s() - tc;
            /* the last one and a stop's are on disk before the run says so (v2179) */
            if ((stop || step == last_step) && (rc = ckpt_drain(r, e))) break;
            hyp_prof_phase("checkpoint_save", HYP_PROF_CHECKPOINT, 1, pc);
            hyp_stop_note_ckpt(&r->stop, now_s() - tc);
        }
        check_grace(r, &grace_warned);
        if (early && !by_signal && !by_deadline) { /* v2148: a finished run, not an interrupted one */
            r->early_stopped = step;
            break;
        }
        if (stop) {
            r->stopped = step, r->stop_signal = by_signal, r->stop_deadline = by_deadline;
            r->stop_saved = a->ckpt_dir != NULL;
            break;
        }
    }
    hyp_progress_break(&r->pg);
    if (!rc && r->stopped) report_stop(r, done_steps, now_s() - t_start);
    else if (!rc && r->early_stopped)
        printf("early stop (v2148) after step %d of %d: %d fits in a row expected less than min_delta %g from the remaining steps (predicted final %.4f [%.4f, %.4f], now %.4f)%s%s%s\n",
               r->early_stopped, r->opt.total_steps, r->lp_below, r->plan.lp_min_delta, r->lp_last.final, r->lp_last.lo,
               r->lp_last.hi, r->lp_last.now, a->ckpt_dir ? "; checkpoint in " : "; no --ckpt-dir: nothing saved",
               a->ckpt_dir ? a->ckpt_dir : "", "");
    if (!rc && !r->stopped)
        printf("done: %d %s%ssteps in %.1f s, final loss %.4f, mean %.0f tok/s, last %d steps %.0f tok/s\n", done_steps,
               r->obj.label, r->obj.label[0] ? " " : "",
               now_s() - t_start, last_loss, steps_timed ? tok_s / steps_timed : 0.0, wn,
               wn ? wn * (double)r->tokens_per_step / wsum : 0.0);
    if (!rc && r->d.world > 1 && done_steps > 0) /* sent by this rank inside the steps (ring model, coll.h) */
        printf("communication per step (rank %d, data-parallel group): %.1f bytes sent in %.3f collectives%s\n", r->d.rank,
               comm_bytes / done_steps, comm_calls / done_steps, r->be.lsgd ? " (v2173 local SGD)" : r->be.adp ? " (v2174 async dp)" : "");
    if (!rc && r->d.world > 1 && grad_comm_n > 0) /* v2168's measure, with or without it */
        printf("gradient all-reduce per step (rank %d, %d steps after the warm-up): %.3f ms in flight, %.3f ms exposed (the step waited), %.3f ms hidden under backward%s\n",
               r->d.rank, grad_comm_n, 1e3 * grad_comm[0] / grad_comm_n, 1e3 * grad_comm[1] / grad_comm_n,
               1e3 * (grad_comm[0] > grad_comm[1] ? grad_comm[0] - grad_comm[1] : 0) / grad_comm_n,
               p->comm_streams > 0 ? " (v2168 overlap)" : " (after backward)");
    free(wdt);
    return rc;
}

/* After training: rank 0 samples on the host executor with the trained weights. */
static int sample_after(run_t *r, hyp_err *e) {
    const args_t *a = &r->a;
    int rc = train_sync_host(&r->be, e); /* a device run's weights to the host mirror */
    if (!rc && a->sample > 0 && r->d.stage >= 3) rc = train_unshard(&r->x, e); /* rank 0 samples alone */
    if (!rc) rc = train_eval_point_dp(&r->x, r->d.opt, r->d.coll, 1, e); /* schedule-free: sample at the average x */
    if (!rc && a->sample > 0 && r->d.rank == 0 && !(rc = exec_alloc_acts(&r->x, e))) { /* a mirror has none */
        printf("--- sample (%d tokens, temperature %.2f, top-k %d) ---\n", a->sample, a->temperature, a->top_k);
        hyp_tok *tok = r->dtok.file[0] ? hyp_tok_open(r->dtok.file, e) : NULL;
        if (r->dtok.file[0] && !tok) return HYP_EINPUT;
        rc = sample_text(&r->x, a, tok, r->seed, stdout);
        hyp_tok_free(tok);
    }
    return rc;
}

/* v2195-v2198, v2194: the plan's preference objective (train/pref.c) or GRPO (train/grpo.c) in
 * place of the next-token loss, on the examples of --data. */
static int open_post(run_t *r, const post_cfg *pc, hyp_err *e) {
    pref_run pr = {&r->be, pc, r->a.data, r->a.ckpt_dir, r->K, r->seed, r->start_step, r->lstate.epoch, r->lstate.position, NULL};
    return pc->objective == POST_GRPO ? grpo_objective_open(&r->obj, &pr, e) : pref_objective_open(&r->obj, &pr, e);
}

/* v2193: SFT trains on the loss-masked shards of gen data --chat (mask_prompt), or on every token;
 * validation always scores the assistant tokens (where the data has masks). */
static int check_sft(run_t *r, const post_cfg *pc, hyp_err *e) {
    if (!pc->sft || !r->train) return HYP_OK;
    if (pc->mask_prompt && !hyp_loader_masked(r->train))
        return hyp_fail(e, HYP_EINPUT, "%s: this trainer was generated with v2193 SFT (mask_prompt), and the data has no loss masks (S.mask) — prepare it with gen data --chat CHATS.jsonl -o DIR",
                        r->a.data);
    if (!pc->mask_prompt) hyp_loader_set_masked(r->train, 0); /* val stays the assistant-token loss */
    return HYP_OK;
}

/* v2178: the plan's checkpoint section gives --ckpt-dir (relative to the plan's directory),
 * --ckpt-every and --keep their defaults; then the flags that need a directory are checked. */
static int ckpt_defaults(run_t *r) {
    args_t *a = &r->a;
    const plan_t *p = &r->plan;
    if (!a->ckpt_dir && p->ckpt_dir[0] && !a->sample_mode) {
        if (p->ckpt_dir[0] == '/') snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s", p->ckpt_dir);
        else {
            char pd[PATH_MAX];
            hyp_fs_dirname(r->plan_path, pd, sizeof pd);
            snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s/%s", pd, p->ckpt_dir);
        }
        a->ckpt_dir = r->ckpt_dir;
    }
    if (a->ckpt_every < 0) a->ckpt_every = p->ckpt_every;
    if (a->keep < 0) a->keep = p->ckpt_keep ? p->ckpt_keep : 3;
    if ((a->ckpt_every || a->resume || a->deadline > 0) && !a->ckpt_dir) {
        fprintf(stderr, "train: --ckpt-every/--resume/--deadline need --ckpt-dir D — say where checkpoints live (or regenerate with --enable ckpt: v2178 puts a directory in the plan)\n");
        return HYP_EINPUT;
    }
    return HYP_OK;
}

/* v2179: rank 0's writer thread when the plan asks for async checkpoints and rank 0 writes the
 * whole checkpoint (sharded ZeRO saves under mpirun stay blocking). */
static int open_async(run_t *r, hyp_err *e) {
    const plan_t *p = &r->plan;
    if (!p->ckpt_async || !r->a.ckpt_dir || r->d.rank != 0 || r->d.tp) return HYP_OK; /* v2106: tp saves block */
    if (r->d.stage >= 1 && r->d.world > 1) {
        printf("note: async checkpoints (v2179) are off for sharded ZeRO saves on %d ranks: each rank writes its shard while training waits\n",
               r->d.world);
        return HYP_OK;
    }
    return hyp_ckpt_async_open(&r->ckpt_async, p->ckpt_async, e);
}

/* v2171: the plan's all-reduce algorithm on the data-parallel communicator (every rank calls it:
 * it duplicates the communicator), and one line saying so when there is more than one rank. */
static int train_set_allreduce(hyp_coll *coll, const plan_t *p, hyp_err *e) {
    int algo = 0, rc = hyp_coll_allreduce_algo_parse(p->allreduce_algo, &algo, e);
    if (!rc) rc = hyp_coll_set_allreduce(coll, algo, p->allreduce_node_size, e);
    if (!rc && hyp_coll_world(coll) > 1)
        printf(!strcmp(p->backend, "cuda") ? "all-reduce: NCCL_ALGO=%s for the gradients (v2171)\n"
                                            : "all-reduce: %s on MPI point-to-point for the gradients (v2171)\n",
               !strcmp(p->backend, "cuda") ? (algo == HYP_AR_RING ? "Ring" : "Tree") : p->allreduce_algo);
    return rc;
}

static int run(int argc, char **argv, hyp_coll *coll) {
    static run_t r; /* large (paths); one per process */
    memset(&r, 0, sizeof r);
    int rc = parse_args(argc, argv, &r.a);
    if (rc) return rc;
    const args_t *a = &r.a;
    hyp_err e = {{0}};
    if (a->plan) snprintf(r.plan_path, sizeof r.plan_path, "%s", a->plan);
    else default_plan_path(r.plan_path, sizeof r.plan_path);
    if (a->sample_mode && !a->plan) { /* the checkpoint's own plan copy, when it carries one (ckpt.h) */
        char own[sizeof r.plan_path];
        rc = hyp_ckpt_plan(a->ckpt_dir, own, sizeof own, &e);
        if (rc && rc != HYP_ENOCKPT) {
            fprintf(stderr, "train: %s\n", e.msg);
            return rc;
        }
        if (!rc && own[0]) memcpy(r.plan_path, own, sizeof own);
        rc = 0;
    }
    if ((rc = plan_load(r.plan_path, &r.plan, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        return rc;
    }
    plan_t *p = &r.plan;
    post_cfg post;
    if ((rc = post_cfg_load(r.plan_path, &post, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        plan_free(p);
        return rc;
    }
    if ((rc = ckpt_defaults(&r))) {
        plan_free(p);
        return rc;
    }
    if (!a->sample_mode &&
        (rc = train_prof_open(&r.prof, a->profile, a->profile_steps, a->memory_profile, p, r.plan_path, hyp_coll_rank(coll),
                              hyp_coll_world(coll), &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        train_prof_close(&r.prof);
        plan_free(p);
        return rc;
    }
    if (p->preempt && !a->ckpt_dir && !a->sample_mode) {
        fprintf(stderr, "train: %s: this trainer was generated for preemptible machines (v2177 spot_instance): it needs --ckpt-dir D to save when a preemption notice arrives — pass --ckpt-dir\n",
                r.plan_path);
        plan_free(p);
        return HYP_EINPUT;
    }
    r.d = (dp_t){coll, hyp_coll_rank(coll), hyp_coll_world(coll), p->zero_stage, NULL, NULL, NULL, 0, NULL, NULL, NULL};
    if (p->tp) { /* v2106: the dp x tp mesh; r.d becomes the dp axis */
        const char *no = a->sample_mode || a->sample > 0 ? "sampling"
                         : post.objective != POST_NONE ? "a post-training objective" : p->pr_on ? "pruning (v2154)"
                         : p->param_bf16 ? "bf16 parameters (v2161)" : p->zero_stage ? "ZeRO" : NULL;
        rc = no ? train_tp_refuse(p, r.plan_path, no, &e) : train_tp_mesh(p, r.plan_path, &r.d, &e);
        if (rc) {
            if (hyp_coll_rank(coll) == 0) fprintf(stderr, "train: %s\n", e.msg);
            train_tp_close(&r.d);
            plan_free(p);
            return rc;
        }
    }
    if (p->pp) { /* v2107: dp x pp, a stage per rank; r.d becomes the dp axis */
        const char *no = a->sample_mode || a->sample > 0 ? "sampling"
                         : post.objective != POST_NONE ? "a post-training objective" : p->pr_on ? "pruning (v2154)"
                         : p->param_bf16 ? "bf16 parameters (v2161)" : p->zero_stage ? "ZeRO"
                         : a->ckpt_dir || a->resume ? "checkpoints (--ckpt-dir, --resume)" : a->init_from ? "--init-from" : NULL;
        rc = no ? hyp_fail(&e, HYP_EINPUT, "%s: %s with pipeline parallelism (v2107, %d stages) is not implemented — drop it, or regenerate the trainer without pp", r.plan_path, no, p->pp)
                : train_pp_mesh(p, r.plan_path, &r.d, &e);
        if (rc) {
            if (hyp_coll_rank(coll) == 0) fprintf(stderr, "train: %s\n", e.msg);
            train_tp_close(&r.d);
            plan_free(p);
            return rc;
        }
    }
    if (p->cp) { /* v2108: the cp groups; the world stays the data-parallel communicator */
        const char *no = a->sample_mode || a->sample > 0 ? "sampling"
                         : post.objective != POST_NONE ? "a post-training objective" : p->pr_on ? "pruning (v2154)"
                         : a->resume ? "--resume" : a->stream ? "--stream" : a->seq ? "--seq" : NULL;
        if ((rc = train_cp_open(p, r.plan_path, coll, no, &r.cp, &e))) {
            if (hyp_coll_rank(coll) == 0) fprintf(stderr, "train: %s\n", e.msg);
            plan_free(p);
            return rc;
        }
    }
    if (p->ep) { /* v2109: ep groups inside the world; r.d stays the world (every rank data-parallel) */
        const char *no = a->sample_mode || a->sample > 0 ? "sampling"
                         : a->ckpt_dir && (strcmp(p->optim.kind, "adamw") || p->optim.state_dtype[0] != HYP_DT_F32)
                             ? "checkpoints (--ckpt-dir) of an optimizer other than AdamW with fp32 states"
                         : post.objective != POST_NONE ? "a post-training objective" : p->zero_stage ? "ZeRO"
                         : p->tp ? "tensor parallelism" : p->lsgd_every > 0 ? "local SGD (v2173)" : NULL;
        if ((rc = train_ep_mesh(p, r.plan_path, no, &r.d, &e))) {
            if (hyp_coll_rank(coll) == 0) fprintf(stderr, "train: %s\n", e.msg);
            train_ep_close(&r.d, &r.x);
            plan_free(p);
            return rc;
        }
    }
    if (r.d.world > 1 && !p->data_parallel) {
        if (r.d.rank == 0)
            fprintf(stderr, "train: %s: this trainer was generated without data parallelism, and mpirun started %d ranks — regenerate it with --enable dp (or zero1/zero2/zero3/fsdp), or run one process\n",
                    r.plan_path, r.d.world);
        plan_free(p);
        return HYP_EINPUT;
    }
    if (p->allreduce_algo[0] && (rc = train_set_allreduce(coll, p, &e))) { /* v2171 */
        fprintf(stderr, "train: %s: %s\n", r.plan_path, e.msg);
        plan_free(p);
        return rc;
    }
    /* v2125: data made for another vocabulary is refused before anything starts */
    if (!a->sample_mode && (rc = train_stream_check(p, a->stream, a->data, a->tokenizer, &r.dtok, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        plan_free(p);
        return rc;
    }
    if (!a->sample_mode && a->data &&
        ((rc = hyp_data_tok_read(a->data, &r.dtok, &e)) || (rc = hyp_data_tok_check_model(a->data, &r.dtok, p->tokenizer, p->V, &e)) ||
         (a->init_from && (rc = hyp_data_tok_check_init(a->init_from, &r.dtok, &e))))) {
        fprintf(stderr, "train: %s\n", e.msg);
        plan_free(p);
        return rc;
    }
    r.B = a->batch ? a->batch : p->B, r.T = a->seq ? a->seq : p->T;
    r.K = a->grad_accum ? a->grad_accum : p->grad_accum;
    train_opts_from_plan(&r.opt, p);
    if (a->have_lr) r.opt.lr = a->lr;
    r.lr0 = r.opt.lr;
    if (a->steps) r.opt.total_steps = a->steps;
    r.seed = a->have_seed ? (uint64_t)a->seed : p->seed;
    r.opt.seed = r.seed;
    r.eval_every = a->eval_every >= 0 ? a->eval_every : p->eval_every;
    r.eval_batches = a->eval_batches >= 0 ? a->eval_batches : p->eval_batches;
    r.tokens_per_step = (int64_t)r.B * r.T * r.K * r.d.world;
    /* a checkpoint holds the parameters and (AdamW) two states; each rank writes at most that */
    hyp_stop_init(&r.stop, a->deadline, 3.0 * (double)p->param_bytes);
    /* a device backend trains in the host executor's ZeRO layout (stage 3: its layer groups); the
     * host keeps a mirror (initialization, checkpoints, sampling) without activations */
    train_backend_caps caps;
    if ((rc = train_backend_caps_of(p, &caps, &e))) {
        fprintf(stderr, "train: %s\n", e.msg);
        plan_free(p);
        return rc;
    }
    int mirror = !caps.host_buffers && !a->sample_mode;
    if (!(rc = hyp_optim_open(p, &r.d.opt, &e)) && r.d.opt->eval_point && (r.d.stage >= 3 || (r.d.stage >= 1 && mirror)))
        rc = hyp_fail(&e, HYP_EINPUT, "train: optimizer '%s' evaluates at another point than it trains at, which this runtime moves between only without ZeRO or at stages 1-2 on the cpu backend (stage %d here) — generate the trainer without ZeRO, or with zero1/zero2 for --target cpu",
                      r.d.opt->kind, r.d.stage);
    if (!rc && r.d.opt->shard_matrix && r.d.stage >= 1 &&
        (mirror || !(r.d.opt->matrix_solve || (r.d.opt->zero1_full_grad && r.d.stage == 1))))
        rc = hyp_fail(&e, HYP_EINPUT, "optimizer '%s' updates whole matrices or blocks, which this runtime distributes under ZeRO (stage %d here) only on the cpu backend, at stages 1-2 (Muon) or 1 (Adam-mini) — generate the trainer without ZeRO or with a supported stage",
                      r.d.opt->kind, r.d.stage);
    if (!rc && p->tp && (mirror || r.d.opt->shard_matrix))
        rc = train_tp_refuse(p, r.plan_path, mirror ? "a device backend" : "an optimizer of whole matrices", &e);
    if (!rc &&
        !(rc = mirror ? exec_init_mirror(&r.x, p, r.d.coll, r.d.stage, &e) : exec_init_dp(&r.x, p, r.d.coll, r.d.stage, &e)) &&
        !(rc = exec_bind(&r.x, r.B, r.T, &e))) {
        r.x.tp = r.d.tp; /* v2106: the group its allreduce_tp ops sum over */
        r.x.cp = r.cp;   /* v2108: the group its ring_attention ops pass K/V around */
        if (p->tp) exec_init_params_tp(&r.x, r.seed, r.d.tp_rank); /* the np=1 weights, sliced */
        else exec_init_params(&r.x, r.seed); /* same seed on every rank: identical replicas */
        hyp_rng_seed2(&r.rng, r.seed, 1);
        if (a->init_from) {
            char what[4400];
            if (!(rc = train_ckpt_init_from(&r.d, &r.x, a->init_from, what, sizeof what, &e)))
                printf("initial weights: %s (optimizer and schedule fresh)\n", what);
        }
        if (!rc && (a->resume || a->sample_mode)) rc = resume(&r, &e);
        if (!rc) rc = train_ep_attach(&r.d, &r.x, r.plan_path, &e); /* v2109: the moe ops dispatch */
    }
    distill *dist = NULL; /* v2149: a teacher inside the fused loss (cpu, train/distill.c) */
    if (!rc && a->sample_mode) { /* sampling runs on the host executor: same weights, same numerics */
        hyp_tok *tok = NULL; /* the checkpoint's data tokenizer (v2125), checked against its hash */
        if (r.ck_tok_file[0] && !(tok = hyp_tok_open(r.ck_tok_file, &e)))
            rc = hyp_fail(&e, HYP_EINPUT, "%s (the tokenizer of the checkpoint's training data) — restore it, or re-create the data directory it names", e.msg);
        else if (tok && strcmp(hyp_tok_hash(tok), r.ck_tok_hash) != 0)
            rc = hyp_fail(&e, HYP_EINPUT, "%s: xxh3 %s, but the checkpoint was trained with tokenizer %s — this file was replaced; restore the original",
                          r.ck_tok_file, hyp_tok_hash(tok), r.ck_tok_hash);
        if (!rc && r.d.rank == 0) rc = sample_text(&r.x, a, tok, r.seed, stdout);
        hyp_tok_free(tok);
    } else if (!rc && !(rc = distill_open(&dist, r.plan_path, &r.x, &caps, &e)) && dist)
        printf("%s\n", distill_describe(dist));
    if (!rc && dist && p->tp) rc = train_tp_refuse(p, r.plan_path, "distillation (v2149)", &e);
    /* one loop for every objective: the next-token loss over the loader (pretraining, SFT,
     * distillation) or a post-training objective over the examples (objective.h) */
    int post_obj = post.objective >= POST_DPO;
    if (!rc && !a->sample_mode && !(rc = train_backend_open(&r.be, p, r.plan_path, &r.x, &r.d, r.B, r.T, &e)) &&
        !(rc = distill_attach(dist, &r.be, &e)) &&
        !(rc = post_obj ? open_post(&r, &post, &e) : open_loaders(&r, &e)) && !(rc = open_logs(&r, &e)) &&
        !(rc = check_sft(&r, &post, &e)) && !(rc = train_guard_open(&r.guard, p, &r.d, &e)) &&
        !(rc = loss_scale_open(&r, &e)) && !(rc = open_async(&r, &e))) {
        train_guard_attach(&r.guard, &r.be);
        hyp_progress_init(&r.pg, stdout, a->log_every);
        choose_peak(&r);
        print_banner(&r, &e);
        train_tp_describe(&r.d, p);
        if (p->pp && !(rc = train_pp_open(p, r.plan_path, r.d.pp, &r.x, r.K, &r.be.pp, &e))) train_pp_describe(r.be.pp, p);
        train_cp_describe(p, r.cp, r.d.world / (p->cp ? p->cp : 1));
        train_ep_describe(&r.d, p);
        /* v2148 on rank 0 (it logs): its early-stop decision reaches the others through agree_stop */
        if (p->lp_every > 0 && r.d.rank == 0 && !(r.lp = hyp_losspred_new(r.opt.total_steps)))
            rc = hyp_fail(&e, HYP_EFAIL, "out of memory for the loss history (%d steps)", r.opt.total_steps);
        if (!rc && p->pr_on) { /* v2154/v2156: masks on the host arenas (the plan allows only cpu) */
            if (!r.be.i->caps.host_buffers)
                rc = hyp_fail(&e, HYP_EINPUT, "pruning (v2154) needs the cpu backend; this trainer runs on %s — regenerate with --target cpu", r.be.name);
            else if (!(rc = train_prune_open(&r.be.prune, p, &r.x, r.opt.total_steps, r.start_step > 0, &e))) {
                char d[256];
                printf("%s\n", train_prune_describe(r.be.prune, d, sizeof d));
            }
        }
        if (!rc && p->lsgd_every > 0) { /* v2173: no per-step gradient all-reduce; the outer step */
            if (!r.be.i->caps.host_buffers && !r.be.i->params_host)
                rc = hyp_fail(&e, HYP_EINPUT, "local SGD (v2173) runs on the cpu and device backends; this trainer runs on %s — regenerate with --target cpu", r.be.name);
            else if (!(rc = train_local_sgd_open(&r.be.lsgd, p, &r.x, &r.d, &e))) {
                char d[256];
                printf("%s\n", train_local_sgd_describe(r.be.lsgd, d, sizeof d));
                if (a->ckpt_dir && r.d.world > 1 && a->ckpt_every % p->lsgd_every)
                    printf("note: --ckpt-every %d is not a multiple of sync_every %d: a checkpoint between synchronizations holds rank 0's own parameters (not the average)\n",
                           a->ckpt_every, p->lsgd_every);
            }
        }
        if (!rc && p->adp_on) { /* v2174: the gradient all-reduce applied staleness steps later */
            if (!r.be.i->caps.host_buffers && !r.be.i->params_host) /* a device: its gradients through the host mirror (backend_dev.c) */
                rc = hyp_fail(&e, HYP_EINPUT, "async dp (v2174) runs on the cpu and device backends; this trainer runs on %s — regenerate with --target cpu", r.be.name);
            else if (!(rc = train_async_open(&r.be.adp, p, &r.x, &r.d, &e))) {
                char d[256];
                printf("%s\n", train_async_describe(r.be.adp, d, sizeof d));
                if (a->ckpt_dir && p->adp_staleness > 0)
                    printf("note: checkpoints do not hold the gradient reductions in flight (staleness %d): a resumed run drops them (not the uninterrupted run)\n",
                           p->adp_staleness);
            }
        }
        if (!rc && p->gc_on) { /* v2172: a compressed exchange in place of the gradient all-reduce */
            if (!r.be.i->caps.host_buffers)
                rc = hyp_fail(&e, HYP_EINPUT, "gradient compression (v2172) runs on the cpu backend; this trainer runs on %s — regenerate with --target cpu", r.be.name);
            else if (!(rc = train_grad_compress_open(&r.be.gc, p, &r.x, &r.d, &e))) {
                char d[320];
                printf("%s\n", train_grad_compress_describe(r.be.gc, d, sizeof d));
            }
        }
        if (!rc && r.lp && p->lp_law == HYP_LAW_LR_ANNEALING) { /* the schedule's LR areas, to the last step */
            double *lr = malloc(sizeof(double) * ((size_t)r.opt.total_steps + 1));
            if (lr) {
                for (int s = 1; s <= r.opt.total_steps; s++) lr[s] = train_lr_at(&r.opt, s);
                lr[0] = lr[1];
            }
            if (!lr || hyp_losspred_set_lr(r.lp, lr, r.opt.total_steps, r.opt.warmup_steps))
                rc = hyp_fail(&e, HYP_EINPUT, "loss prediction (v2148): the LR schedule has no positive learning rate — use --set v2148.law=power");
            free(lr);
        }
        if (!rc && r.lp && r.start_step > 0 && a->metrics) /* a resumed run: its history from the metrics it appends to */
            printf("loss prediction (v2148): %d earlier steps' losses read back from %s\n",
                   hyp_losspred_load_metrics(r.lp, a->metrics, r.start_step), a->metrics);
        if (!rc) rc = train_loop(&r, &e);
        if (!rc) train_tp_report(&r.d, r.opt.total_steps - r.start_step);
        if (!rc && r.be.pp) train_pp_report(r.be.pp, r.opt.total_steps - r.start_step);
        if (!rc) train_cp_report(&r.plan, r.cp, r.opt.total_steps - r.start_step);
        if (!rc) train_ep_report(&r.d, r.opt.total_steps - r.start_step);
        if (!rc) rc = train_prof_finish(&r.prof, &r.be, &e);
        if (!rc && !r.stopped) rc = sample_after(&r, &e);
        if (!rc && r.stopped) rc = r.stop_saved ? HYP_EXIT_STOPPED_SAVED : HYP_EXIT_STOPPED_UNSAVED;
    }
    if (rc && e.msg[0]) fprintf(stderr, "train: %s\n", e.msg);
    hyp_ckpt_async_close(r.ckpt_async); /* drains: nothing queued is lost on an error exit */
    hyp_metrics_close(r.mlog);
    hyp_tboard_close(r.tb);
    hyp_losspred_free(r.lp);
    train_prune_close(r.be.prune);
    train_local_sgd_close(r.be.lsgd);
    train_async_close(r.be.adp, &r.d);
    train_grad_compress_close(r.be.gc);
    train_prof_close(&r.prof);
    train_objective_close(&r.obj);
    hyp_loader_close(r.train);
    hyp_loader_close(r.val);
    distill_close(dist, &r.x);
    train_pp_close(r.be.pp);
    train_backend_close(&r.be);
    train_ep_close(&r.d, &r.x);
    exec_free(&r.x);
    train_tp_close(&r.d);
    if (r.cp) hyp_coll_finalize(r.cp);
    plan_free(p);
    return rc;
}
