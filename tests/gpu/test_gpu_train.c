/* test_gpu_train.c — the generated trainer's device loop (runtime/train_dev.c) on a real GPU.
 * Where there is no GPU it prints "skipped: no GPU (reason)" as its first line and exits 0 (ctest
 * shows it as skipped); the GPU is detected independently of the device layer (gpu_probe.h).
 *
 * With a GPU:
 *   op by op: tests/unit/test_exec_sim --device cuda --target sm_XX — the rendered kernels as
 *     cubins and cuBLASLt GEMMs against the CPU ops (logits, loss, every parameter gradient, 20
 *     AdamW steps with the device norm), at that test's tolerances;
 *   20 steps: `gen --target sm_XX` and `gen --target sim` trainers for tiny (fp32, AdamW, clip)
 *     train 20 steps on the same data; losses within 1e-4 relative (the GPU sums GEMMs and
 *     reductions in fp32 in its own order: docs/test-tolerances.md E2 + E3, 2e-5 for <= 8 AdamW
 *     steps of tiny, growing at most linearly: <= 5e-5 after 20; sim vs cpu is held to the same
 *     bound in tests/gen/test_sim_trainer.sh);
 *   with 2 GPUs and mpirun: ZeRO 0 and 2 at 2 ranks (NCCL) against 1 rank with the whole batch,
 *     losses within 1e-4 relative (the same reasons). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"

#include "../unit/hyp_test.h"
#include "gpu_probe.h"

#define STEPS 20

static char g_tmp[256];

/* Runs a shell command from the source directory; its output into TMP/name.log. 0 on success. */
static int sh(const char *name, const char *cmd) {
    char full[4096];
    snprintf(full, sizeof full, "cd %s && (%s) > %s/%s.log 2>&1", HYP_SOURCE_DIR, cmd, g_tmp, name);
    int rc = system(full);
    if (rc) {
        snprintf(full, sizeof full, "tail -5 %s/%s.log | sed 's/^/    /'", g_tmp, name);
        if (system(full)) {}
    }
    return rc;
}

static int log_has(const char *name, const char *what) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/%s.log", g_tmp, name);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
    if (f) fclose(f);
    return found;
}

/* The "loss" values of a metrics JSONL file; returns how many (up to max). */
static int losses(const char *name, double *out, int max) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl", g_tmp, name);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"loss\":");
        if (p) out[n++] = strtod(p + 7, NULL);
    }
    if (f) fclose(f);
    return n;
}

/* Worst relative loss difference of two runs of STEPS steps (a huge value when one is short). */
static double worst_rel(const char *a, const char *b) {
    double la[STEPS], lb[STEPS], w = 0;
    if (losses(a, la, STEPS) != STEPS || losses(b, lb, STEPS) != STEPS) return 1e30;
    for (int i = 0; i < STEPS; i++) {
        double d = (la[i] - lb[i]) / lb[i];
        if (d < 0) d = -d;
        if (!(d <= w)) w = d;
    }
    return w;
}

static int gen_trainer(const char *dir, const char *target, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/generator/gen specs/v2500.yaml --enable adamw,clip%s --model tiny --target %s --batch 2 --seq 16 -o %s/%s",
             HYP_BINARY_DIR, extra, target, g_tmp, dir);
    return sh(dir, cmd);
}

static int train(const char *dir, const char *name, const char *mpi, int batch) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s/%s/train --data %s/data --steps %d --batch %d --seq 16 --eval-every 0 --metrics %s/%s.jsonl",
             mpi, g_tmp, dir, g_tmp, STEPS, batch, g_tmp, name);
    return sh(name, cmd);
}

int main(void) {
    char why[512];
    int gpus = probe_gpu(why, sizeof why);
    if (!gpus) {
        printf("skipped: no GPU (%s)\n", why);
        return 0;
    }
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hyp-gpu-train-%d", (int)getpid());
    hyp_err e;
    hyp_device *cu = NULL;
    int rc = hyp_device_open("cuda", &cu, &e);
    CHECK(!rc, "a GPU is present and hyp_device_open(\"cuda\") succeeds%s%s", rc ? ": " : "", rc ? e.msg : "");
    if (rc) return hyp_test_finish();
    char target[16], cmd[2048];
    snprintf(target, sizeof target, "sm_%d", cu->info.sm);
    printf("info %s, %s, %d GPU%s\n", cu->info.name, target, gpus, gpus == 1 ? "" : "s");
    cu->close(cu);

    snprintf(cmd, sizeof cmd, "%s/tests/test_exec_sim --device cuda --target %s", HYP_BINARY_DIR, target);
    CHECK(!sh("exec_cuda", cmd), "op by op on the GPU against the CPU ops (%s; log %s/exec_cuda.log)", cmd, g_tmp);

    snprintf(cmd, sizeof cmd, "mkdir -p %s && head -c 40000 specs/SCHEMA.md > %s/c.txt && %s/generator/gen data %s/c.txt -o %s/data",
             g_tmp, g_tmp, HYP_BINARY_DIR, g_tmp, g_tmp);
    rc = sh("data", cmd) || gen_trainer("gpu", target, "") || gen_trainer("sim", "sim", "");
    CHECK(!rc, "gen: data, an %s and a sim trainer for tiny", target);
    if (!rc) {
        int a = train("gpu", "gpu1", "", 2), b = train("sim", "sim1", "", 2);
        CHECK(!a && log_has("gpu1", "backend: cuda"), "the %s trainer trains %d steps on the GPU", target, STEPS);
        CHECK(!b, "the sim trainer trains %d steps", STEPS);
        double w = worst_rel("gpu1", "sim1");
        CHECK(w <= 1e-4, "%d steps: GPU losses vs sim, worst relative difference %.3g (tolerance 1e-4)", STEPS, w);
    }
    if (!rc && gpus >= 2 && !system("command -v mpirun >/dev/null")) {
        const char *mpi = "mpirun -np 2 --oversubscribe -x HYP_SIM_CACHE";
        for (int stage = 0; stage <= 2 && !rc; stage += 2) {
            char dir[32], n1[32], n2[32];
            snprintf(dir, sizeof dir, "gpu_z%d", stage);
            snprintf(n1, sizeof n1, "z%d_np1", stage);
            snprintf(n2, sizeof n2, "z%d_np2", stage);
            rc = gen_trainer(dir, target, stage ? ",dp,zero2" : ",dp");
            int a = rc || train(dir, n1, "", 2), b = rc || train(dir, n2, mpi, 1);
            double w = worst_rel(n1, n2);
            CHECK(!a && !b && w <= 1e-4, "ZeRO %d: 2 GPUs (NCCL) vs 1, worst relative loss difference %.3g (tolerance 1e-4)", stage, w);
        }
    } else if (!rc) {
        printf("note: %s — the 2-rank NCCL checks need 2 GPUs and mpirun\n", gpus < 2 ? "one GPU" : "no mpirun");
    }
    if (!g_fail) rm_rf(g_tmp);
    return hyp_test_finish();
}
