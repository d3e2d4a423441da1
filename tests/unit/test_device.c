/* test_device.c — the device layer (runtime/device.h) through its "sim" implementation:
 *   memory: fresh blocks poisoned (0xFF), round trips (sync and async), d2d, memset, pinned host
 *     memory, and the checks that a host pointer or an overrun is refused;
 *   modules and launch: a .cu through the simulator's cache and a prebuilt .so, every argument
 *     size, 2D grids, dynamic shared memory, refused launches (bad grid, arguments, shared size),
 *     asynchronous kernel faults that stay (sticky) like CUDA's;
 *   streams and events: a kernel on stream 2 that waits for an event recorded after a kernel on
 *     stream 1 sees its result under every drain order; without the wait the ordering bug shows
 *     (stale data) under the default order; a d2h not yet synchronized leaves the host buffer
 *     untouched; *_sync copies wait for every stream; elapsed time needs completed events;
 *   GEMM: every dtype/epilogue combination and the other cases of tests/device/gemm_cases.h
 *     against a double-precision reference (tolerances written there: fp32 1e-5, tf32 1e-3,
 *     bf16 1e-2, fp8 exact), the tf32/bf16 rounding rules, and every refused descriptor;
 *   collectives with one rank (and `--collectives`, which tests/gen/test_device_mpi.sh runs under
 *     mpirun -np 2 and 3);
 *   hyp_device_open("cuda") without a driver gives the clear message (HYP_EINPUT).
 * Prints one line per check and "N passed, M failed". */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../device/gemm_cases.h"
#include "coll.h"
#include "device.h"
#include "sim.h"

#include "hyp_test.h"

static const char *KERNELS = HYP_SOURCE_DIR "/tests/device/basic.cu";
#define N 1000

static hyp_device *open_sim(const char *order) {
    hyp_err e;
    hyp_device *d = NULL;
    if (order) setenv("HYP_SIM_STREAM_ORDER", order, 1);
    else unsetenv("HYP_SIM_STREAM_ORDER");
    if (hyp_device_open("sim", &d, &e)) {
        printf("FAIL cannot open sim: %s\n", e.msg);
        exit(1);
    }
    unsetenv("HYP_SIM_STREAM_ORDER");
    return d;
}

static int all_eq(const float *x, int n, float v) {
    for (int i = 0; i < n; i++)
        if (x[i] != v) return 0;
    return 1;
}

static int launch_fill(hyp_device *d, hyp_module *m, float *x, float v, int n, hyp_stream *s, hyp_err *e) {
    hyp_kargs a = {0};
    hyp_kargs_ptr(&a, x), hyp_kargs_f32(&a, v), hyp_kargs_i32(&a, n);
    return d->launch(d, m, "fill", HYP_DIM3((n + 255) / 256, 1, 1), HYP_DIM3(256, 1, 1), 0, &a, s, e);
}
static int launch_add(hyp_device *d, hyp_module *m, float *y, const float *x, float v, int n, hyp_stream *s, hyp_err *e) {
    hyp_kargs a = {0};
    hyp_kargs_ptr(&a, y), hyp_kargs_ptr(&a, x), hyp_kargs_f32(&a, v), hyp_kargs_i32(&a, n);
    return d->launch(d, m, "add_scalar", HYP_DIM3((n + 255) / 256, 1, 1), HYP_DIM3(256, 1, 1), 0, &a, s, e);
}

/* ---- open ----------------------------------------------------------------------------------- */

static void test_open(void) {
    hyp_err e;
    hyp_device *d = NULL;
    CHECK(hyp_device_open("opencl", &d, &e) == HYP_EINPUT && strstr(e.msg, "use \"cuda\" or \"sim\""),
          "an unknown device kind is refused: %s", e.msg);
    const char *want = "no CUDA driver (libcuda.so.1 not found) — train on this machine with a trainer generated for --target cpu or --target sim";
    setenv("HYP_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    int rc = hyp_device_open("cuda", &d, &e);
    unsetenv("HYP_LIBCUDA");
    CHECK(rc == HYP_EINPUT && !strcmp(e.msg, want) && !d, "cuda without a driver: HYP_EINPUT, \"%s\"", e.msg);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        rc = hyp_device_open("cuda", &d, &e);
        CHECK(rc == HYP_EINPUT && !strcmp(e.msg, want), "hyp_device_open(\"cuda\") on this GPU-less machine gives the same message");
    } else {
        dlclose(h);
        printf("ok   (a CUDA driver is present: hyp_device_open(\"cuda\") is checked by tests/gpu)\n");
        g_pass++;
    }
    /* the toolkit's stub driver exports the driver API's symbols, and cuInit fails: every symbol
     * the layer resolves exists under the name it asks for, and the message is the clear one */
    const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
    if ((h = dlopen(stub, RTLD_NOW | RTLD_LOCAL))) {
        dlclose(h);
        setenv("HYP_LIBCUDA", stub, 1);
        rc = hyp_device_open("cuda", &d, &e);
        char rep[1024];
        int bad = hyp_dev_cuda_check_libs(rep, sizeof rep);
        unsetenv("HYP_LIBCUDA");
        CHECK(rc == HYP_EINPUT && strstr(e.msg, "no usable CUDA device") && strstr(e.msg, "--target cpu or --target sim"),
              "cuda with the toolkit's stub driver (symbols resolve, cuInit fails): %s", e.msg);
        CHECK(bad == 0, "every symbol dev_cuda.c uses exists in the stub driver, libcublasLt.so.13 and libnccl.so.2:\n%s", rep);
    } else {
        printf("ok   (no CUDA toolkit stub driver at %s: symbol check skipped)\n", stub);
        g_pass++;
    }
    char rep[1024];
    setenv("HYP_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    CHECK(hyp_dev_cuda_check_libs(rep, sizeof rep) >= 1 && strstr(rep, "not found"), "check_libs reports a missing driver");
    unsetenv("HYP_LIBCUDA");
    d = open_sim(NULL);
    CHECK(!strcmp(d->name, "sim") && d->info.n_sms >= 1 && d->info.total_mem > 0, "sim opens: %s, %d CPUs, %zu MiB",
          d->info.name, d->info.n_sms, d->info.total_mem >> 20);
    d->close(d);
    setenv("HYP_SIM_STREAM_ORDER", "sideways", 1);
    rc = hyp_device_open("sim", &d, &e);
    unsetenv("HYP_SIM_STREAM_ORDER");
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "reverse"), "a bad HYP_SIM_STREAM_ORDER is refused: %s", e.msg);
}

/* ---- memory --------------------------------------------------------------------------------- */

static void test_memory(void) {
    hyp_err e;
    hyp_device *d = open_sim(NULL);
    float *x, *y, hx[N], hy[N];
    int rc = d->mem_alloc(d, (void **)&x, N * 4, &e) | d->mem_alloc(d, (void **)&y, N * 4, &e);
    CHECK(!rc && ((uintptr_t)x & 255) == 0 && ((uintptr_t)y & 255) == 0, "mem_alloc gives 256-byte aligned blocks");
    unsigned char raw[N * 4];
    memset(raw, 0, sizeof raw);
    rc = d->d2h_sync(d, raw, x, N * 4, &e);
    int poisoned = !rc;
    for (int i = 0; i < N * 4; i++) poisoned &= raw[i] == 0xFF;
    CHECK(poisoned, "fresh device memory is poisoned with 0xFF (NaN), as uninitialized GPU memory may hold anything");
    for (int i = 0; i < N; i++) hx[i] = (float)i * 0.5f - 3.0f;
    rc = d->h2d_sync(d, x, hx, N * 4, &e) || d->d2h_sync(d, hy, x, N * 4, &e);
    CHECK(!rc && !memcmp(hx, hy, sizeof hx), "h2d_sync / d2h_sync round trip");
    rc = d->d2d_sync(d, y, x + 100, 200 * 4, &e) || d->d2h_sync(d, hy, y, 200 * 4, &e);
    CHECK(!rc && !memcmp(hy, hx + 100, 200 * 4), "d2d_sync at an offset");
    rc = d->memset_sync(d, y, 0, N * 4, &e) || d->d2h_sync(d, hy, y, N * 4, &e);
    CHECK(!rc && all_eq(hy, N, 0.0f), "memset_sync");
    hyp_stream *s;
    d->stream_create(d, &s, &e);
    for (int i = 0; i < N; i++) hy[i] = -1.0f;
    rc = d->memset(d, y, 0x3F, N * 4, s, &e) || d->d2d(d, y, x, 10 * 4, s, &e) || d->h2d(d, y + 20, hx, 4, s, &e) ||
         d->d2h(d, hy, y, N * 4, s, &e);
    CHECK(!rc && hy[0] == -1.0f, "asynchronous copies have not run before their stream is synchronized");
    rc = d->stream_synchronize(d, s, &e);
    float m3f;
    uint32_t u = 0x3F3F3F3Fu;
    memcpy(&m3f, &u, 4);
    CHECK(!rc && !memcmp(hy, hx, 10 * 4) && hy[20] == hx[0] && hy[10] == m3f && hy[N - 1] == m3f,
          "async memset, d2d, h2d, d2h on one stream run in order");
    d->stream_destroy(d, s);

    float host[4];
    rc = d->h2d_sync(d, host, hx, 16, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "not device memory"), "h2d to a host pointer is refused: %s", e.msg);
    rc = d->d2h(d, hy, hx, 16, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "copy source"), "d2h from a host pointer is refused: %s", e.msg);
    rc = d->d2d(d, x + N - 2, y, 16, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "overrun"), "a copy past the end of a block is refused: %s", e.msg);
    rc = d->memset(d, y + 1, 0, N * 4, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "overrun"), "a memset past the end is refused");
    rc = d->memset_sync(d, NULL, 0, 4, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "NULL"), "a NULL device pointer is refused: %s", e.msg);
    rc = d->h2d(d, x, NULL, 4, NULL, &e);
    CHECK(rc == HYP_EINPUT, "a NULL host pointer is refused");
    CHECK(d->d2d(d, x + N, y, 0, NULL, &e) == HYP_OK, "a zero-byte copy at the end of a block is accepted (as by CUDA)");
    CHECK(d->mem_free(d, NULL, &e) == HYP_OK, "mem_free(NULL) is a no-op");
    rc = d->mem_free(d, x + 1, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "not a pointer returned by mem_alloc"), "mem_free of an interior pointer is refused");
    rc = d->mem_free(d, hx, &e);
    CHECK(rc == HYP_EINPUT, "mem_free of a host pointer is refused");
    void *pin;
    size_t fr = 0, tot = 0;
    rc = d->host_alloc(d, &pin, 4096, &e) || d->h2d_sync(d, x, pin, 16, &e) || d->host_free(d, pin, &e) ||
         d->mem_info(d, &fr, &tot, &e);
    CHECK(!rc && tot > 0 && fr <= tot, "host_alloc / host_free, mem_info (%zu of %zu MiB free)", fr >> 20, tot >> 20);
    CHECK(!d->mem_free(d, x, &e) && !d->mem_free(d, y, &e), "mem_free");
    float *z;
    d->mem_alloc(d, (void **)&z, 0, &e);
    CHECK(z && !d->memset_sync(d, z, 0, 0, &e) && !d->mem_free(d, z, &e), "zero-byte blocks work");
    d->close(d);
}

/* ---- modules and launch --------------------------------------------------------------------- */

static void test_launch(void) {
    hyp_err e;
    hyp_device *d = open_sim(NULL);
    hyp_module *m = NULL, *m2 = NULL;
    int rc = d->module_load(d, KERNELS, &m, &e);
    CHECK(!rc, "module_load compiles and loads tests/device/basic.cu%s%s", rc ? ": " : "", rc ? e.msg : "");
    if (rc) {
        d->close(d);
        return;
    }
    char so[1024];
    snprintf(so, sizeof so, "%s/test_device_basic.so", HYP_BINARY_DIR);
    rc = hyp_sim_compile(KERNELS, so, NULL, &e) || d->module_load(d, so, &m2, &e);
    CHECK(!rc, "module_load of a prebuilt .so%s%s", rc ? ": " : "", rc ? e.msg : "");
    hyp_module *m3 = NULL;
    rc = d->module_load(d, HYP_SOURCE_DIR "/tests/device/missing.cu", &m3, &e);
    CHECK(rc != HYP_OK && !m3, "module_load of a missing file fails: %.120s", e.msg);

    float *x, *y, hx[N], hy[N];
    d->mem_alloc(d, (void **)&x, N * 4, &e), d->mem_alloc(d, (void **)&y, N * 4, &e);
    rc = launch_fill(d, m, x, 2.5f, N, NULL, &e) || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 2.5f), "fill(float*, float, int) over 4 blocks of 256");
    for (int i = 0; i < N; i++) hy[i] = (float)i;
    d->h2d_sync(d, y, hy, N * 4, &e);
    hyp_kargs a = {0};
    hyp_kargs_ptr(&a, y), hyp_kargs_ptr(&a, x), hyp_kargs_f32(&a, 2.0f), hyp_kargs_i64(&a, (int64_t)N);
    rc = (m2 ? d->launch(d, m2, "axpy64", HYP_DIM3(2, 2, 1), HYP_DIM3(256, 1, 1), 0, &a, NULL, &e) : 1) ||
         d->d2h_sync(d, hy, y, N * 4, &e);
    int ok = !rc;
    for (int i = 0; i < N; i++) ok &= hy[i] == (float)i + 5.0f;
    CHECK(ok, "axpy64(float*, const float*, float, int64) on a 2x2 grid from the .so module");
    for (int i = 0; i < 192; i++) hx[i] = (float)i;
    d->h2d_sync(d, x, hx, 192 * 4, &e);
    hyp_kargs r = {0};
    hyp_kargs_ptr(&r, y), hyp_kargs_ptr(&r, x);
    rc = d->launch(d, m, "reverse_block", HYP_DIM3(3, 1, 1), HYP_DIM3(64, 1, 1), 64 * 4, &r, NULL, &e) ||
         d->d2h_sync(d, hy, y, 192 * 4, &e);
    ok = !rc;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 64; t++) ok &= hy[b * 64 + t] == (float)(b * 64 + 63 - t);
    CHECK(ok, "dynamic shared memory (reverse_block, 256 bytes)");

    hyp_kargs big = {0};
    for (int i = 0; i < HYP_KARGS_MAX + 1; i++) hyp_kargs_i32(&big, i);
    rc = d->launch(d, m, "fill", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 0, &big, NULL, &e);
    CHECK(rc == HYP_EINPUT && big.n == -1, "more than %d kernel arguments are refused: %s", HYP_KARGS_MAX, e.msg);
    hyp_kargs wide = {0};
    char blob[24] = {0};
    hyp_kargs_add(&wide, blob, sizeof blob);
    CHECK(wide.n == -1, "an argument over 16 bytes marks the set invalid");
    hyp_kargs fa = {0};
    hyp_kargs_ptr(&fa, x), hyp_kargs_f32(&fa, 0.0f), hyp_kargs_i32(&fa, 1);
    rc = d->launch(d, m, "fill", HYP_DIM3(0, 1, 1), HYP_DIM3(32, 1, 1), 0, &fa, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "invalid grid"), "an empty grid is refused: %s", e.msg);
    rc = d->launch(d, m, "fill", HYP_DIM3(1, 1, 1), HYP_DIM3(2048, 1, 1), 0, &fa, NULL, &e);
    CHECK(rc == HYP_EINPUT, "a 2048-thread block is refused");
    rc = d->launch(d, m, "fill", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 300 * 1024, &fa, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "227 KiB"), "300 KiB of dynamic shared memory is refused: %s", e.msg);
    rc = d->launch(d, NULL, "fill", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 0, &fa, NULL, &e);
    CHECK(rc == HYP_EINPUT, "a launch without a module is refused");
    /* kernel arguments are copied at launch: the kargs may change before the work runs */
    hyp_stream *s;
    d->stream_create(d, &s, &e);
    hyp_kargs ka = {0};
    hyp_kargs_ptr(&ka, x), hyp_kargs_f32(&ka, 4.0f), hyp_kargs_i32(&ka, N);
    rc = d->launch(d, m, "fill", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &ka, s, &e);
    memset(&ka, 0, sizeof ka);
    rc = rc || d->stream_synchronize(d, s, &e) || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 4.0f), "kernel arguments are copied when the launch is enqueued");
    d->stream_destroy(d, s);
    d->module_unload(d, m2);
    d->module_unload(d, m);
    d->close(d);

    /* asynchronous faults are sticky */
    d = open_sim(NULL);
    d->module_load(d, KERNELS, &m, &e);
    hyp_kargs t = {0};
    hyp_kargs_i32(&t, 1);
    rc = d->launch(d, m, "maybe_trap", HYP_DIM3(2, 1, 1), HYP_DIM3(32, 1, 1), 0, &t, NULL, &e);
    CHECK(rc == HYP_OK, "a faulting kernel is enqueued without error (the fault comes when it runs)");
    rc = d->synchronize(d, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "maybe_trap"), "synchronize reports the fault: %s", e.msg);
    void *p;
    rc = d->mem_alloc(d, &p, 16, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "maybe_trap"), "and every call after it (sticky, as in CUDA)");
    d->close(d);
    d = open_sim(NULL);
    d->module_load(d, KERNELS, &m, &e);
    rc = d->launch(d, m, "no_such_kernel", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 0, &t, NULL, &e) ||
         d->synchronize(d, &e);
    CHECK(rc == HYP_EFAIL && strstr(e.msg, "no_such_kernel"), "an unknown kernel name fails when it runs: %s", e.msg);
    d->close(d); /* closes with the module still loaded: close frees it */
}

/* ---- streams and events --------------------------------------------------------------------- */

/* The ordering program: stream 1 fills x, stream 2 adds 1 to x into y and copies y back. With
 * the event between them the result is 2 everywhere; without it, whatever the drain order gives. */
static int ordering(const char *order, int with_event, float *out0, int *untouched_before_sync) {
    hyp_err e;
    hyp_device *d = open_sim(order);
    hyp_module *m;
    hyp_stream *s1, *s2;
    hyp_event *ev;
    float *x, *y, hy[N];
    int rc = d->module_load(d, KERNELS, &m, &e) || d->stream_create(d, &s1, &e) || d->stream_create(d, &s2, &e) ||
             d->event_create(d, &ev, &e) || d->mem_alloc(d, (void **)&x, N * 4, &e) ||
             d->mem_alloc(d, (void **)&y, N * 4, &e) || d->memset_sync(d, x, 0, N * 4, &e);
    for (int i = 0; i < N; i++) hy[i] = -7.0f;
    rc = rc || launch_fill(d, m, x, 1.0f, N, s1, &e);
    if (with_event) rc = rc || d->event_record(d, ev, s1, &e) || d->event_wait(d, s2, ev, &e);
    rc = rc || launch_add(d, m, y, x, 1.0f, N, s2, &e) || d->d2h(d, hy, y, N * 4, s2, &e);
    if (untouched_before_sync) *untouched_before_sync = hy[0] == -7.0f;
    rc = rc || (with_event ? d->stream_synchronize(d, s2, &e) : d->synchronize(d, &e));
    if (rc) printf("    %s\n", e.msg);
    *out0 = hy[0];
    int uniform = all_eq(hy, N, hy[0]);
    d->close(d);
    return rc ? -1 : uniform;
}

static void test_streams(void) {
    float v;
    int untouched = 0;
    const char *orders[] = {"reverse", "forward", "eager"};
    for (int i = 0; i < 3; i++) {
        int u = ordering(orders[i], 1, &v, &untouched);
        CHECK(u == 1 && v == 2.0f, "%s order: a kernel on stream 2 waiting for an event recorded after a kernel on stream 1 sees its result (%g)",
              orders[i], v);
        if (i == 0) CHECK(untouched, "a d2h whose stream is not synchronized has not written the host buffer");
        if (i == 2) CHECK(!untouched, "eager order runs every operation when it is enqueued");
    }
    int u = ordering(NULL, 0, &v, NULL);
    CHECK(u == 1 && v == 1.0f, "without the event the ordering bug shows: stream 2 read x before stream 1 wrote it (%g, not 2)", v);
    u = ordering("forward", 0, &v, NULL);
    CHECK(u == 1 && v == 2.0f, "(forward order hides that bug: why reverse is the default)");

    hyp_err e;
    hyp_device *d = open_sim(NULL);
    hyp_module *m;
    hyp_stream *s1, *s3;
    hyp_event *a, *b, *never;
    float *x, hx[N];
    d->module_load(d, KERNELS, &m, &e);
    d->stream_create(d, &s1, &e), d->stream_create(d, &s3, &e);
    d->event_create(d, &a, &e), d->event_create(d, &b, &e), d->event_create(d, &never, &e);
    d->mem_alloc(d, (void **)&x, N * 4, &e);
    int rc = d->event_record(d, a, s1, &e) || launch_fill(d, m, x, 6.0f, N, s1, &e) || d->event_record(d, b, s1, &e);
    float ms = -1;
    int r2 = d->event_elapsed_ms(d, a, b, &ms, &e);
    CHECK(!rc && r2 == HYP_EINPUT && strstr(e.msg, "not completed"), "elapsed time before the events completed is refused: %s", e.msg);
    rc = d->event_synchronize(d, b, &e) || d->event_elapsed_ms(d, a, b, &ms, &e);
    CHECK(!rc && ms >= 0.0f, "event_synchronize, then elapsed_ms = %.3f ms", ms);
    rc = d->event_synchronize(d, never, &e) || d->event_wait(d, s3, never, &e);
    CHECK(!rc, "an event never recorded is complete (synchronize and wait return at once)");
    rc = d->event_elapsed_ms(d, never, b, &ms, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "never recorded"), "elapsed time of an unrecorded event is refused");
    rc = launch_fill(d, m, x, 8.0f, N, s1, &e) || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 8.0f), "a *_sync copy waits for the work of every stream");
    rc = launch_fill(d, m, x, 11.0f, N, s3, &e);
    d->stream_destroy(d, s3);
    rc = rc || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 11.0f), "destroying a stream completes its pending work");
    rc = launch_fill(d, m, x, 12.0f, N, s1, &e) || d->event_record(d, a, s1, &e);
    d->event_destroy(d, a);
    rc = rc || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 12.0f), "destroying an event with a pending record is safe");
    /* a waited-on event re-recorded later: the wait keeps the record it saw */
    hyp_stream *s4;
    d->stream_create(d, &s4, &e);
    float *y;
    d->mem_alloc(d, (void **)&y, N * 4, &e);
    rc = launch_fill(d, m, x, 1.0f, N, s1, &e) || d->event_record(d, b, s1, &e) || d->event_wait(d, s4, b, &e) ||
         launch_add(d, m, y, x, 1.0f, N, s4, &e) || launch_fill(d, m, x, 5.0f, N, s1, &e) ||
         d->event_record(d, b, s1, &e) || d->stream_synchronize(d, s4, &e) || d->d2h_sync(d, hx, y, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 2.0f), "a wait refers to the event's latest record when the wait was enqueued");
    rc = d->event_synchronize(d, b, &e) || d->d2h_sync(d, hx, x, N * 4, &e);
    CHECK(!rc && all_eq(hx, N, 5.0f), "synchronizing the re-recorded event runs the later work");
    d->close(d);
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

static void test_rounding(void) {
    float one = 1.0f;
    CHECK(hyp_tf32_round(one + ldexpf(1, -11)) == one && hyp_tf32_round(one + 3 * ldexpf(1, -11)) == one + ldexpf(1, -9) &&
              hyp_tf32_round(one + ldexpf(1, -11) + ldexpf(1, -20)) == one + ldexpf(1, -10) &&
              hyp_tf32_round(-(one + ldexpf(1, -10))) == -(one + ldexpf(1, -10)),
          "tf32: 10 mantissa bits, round to nearest, ties to even");
    CHECK(isinf(hyp_tf32_round(FLT_MAX)) && hyp_tf32_round(-FLT_MAX) == -INFINITY && isinf(hyp_tf32_round(INFINITY)) && isnan(hyp_tf32_round(NAN)),
          "tf32: overflow rounds to infinity, inf and NaN kept");
    CHECK(hyp_bf16_to_f32(hyp_bf16_from_f32(one + ldexpf(1, -8))) == one &&
              hyp_bf16_to_f32(hyp_bf16_from_f32(one + 3 * ldexpf(1, -8))) == one + ldexpf(1, -6) &&
              hyp_bf16_from_f32(-2.0f) == 0xC000 && isnan(hyp_bf16_to_f32(hyp_bf16_from_f32(NAN))) &&
              isinf(hyp_bf16_to_f32(hyp_bf16_from_f32(3.4e38f))) && hyp_bf16_from_f32(INFINITY) == 0x7F80,
          "bf16: round to nearest even, NaN stays NaN, overflow and inf give inf");
    CHECK(hyp_dtype_size(HYP_DT_F32) == 4 && hyp_dtype_size(HYP_DT_BF16) == 2 && hyp_dtype_size(HYP_DT_E5M2) == 1 &&
              hyp_dtype_size((hyp_dtype)9) == 0 && !strcmp(hyp_dtype_name((hyp_dtype)9), "?") &&
              !strcmp(hyp_epilogue_name(HYP_EPI_BGRADB), "bgradb") && !strcmp(hyp_epilogue_name(HYP_EPI__COUNT), "?"),
          "dtype sizes and names");
    /* the tf32 compute mode really rounds the inputs (host pointers: hyp_gemm_cpu directly) */
    float A = one + ldexpf(1, -11) + ldexpf(1, -20), B = 1.0f, D32 = 0, Dtf = 0;
    hyp_gemm g = {.m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldd = 1, .alpha = 1.0f, .a = &A, .b = &B, .d = &D32};
    hyp_err e;
    int rc = hyp_gemm_cpu(&g, &e);
    g.compute = HYP_GEMM_TF32, g.d = &Dtf;
    rc = rc || hyp_gemm_cpu(&g, &e);
    CHECK(!rc && D32 == A && Dtf == one + ldexpf(1, -10), "GEMM: fp32 compute keeps the input, tf32 compute rounds it (%.9g vs %.9g)", D32, Dtf);
}

static void test_gemm(void) {
    static gcase cases[256];
    int n = gc_list(cases, 256);
    hyp_device *d = open_sim(NULL);
    int fails = 0;
    for (int i = 0; i < n; i++) {
        gdata g;
        hyp_err e;
        char msg[256];
        if (gc_make(&cases[i], &g)) {
            CHECK(0, "gemm %s: out of memory", cases[i].label);
            continue;
        }
        int rc = gc_run(d, &cases[i], &g, &e);
        int ok = !rc && gc_check(&cases[i], &g, 1e-3, msg, sizeof msg);
        CHECK(ok, "gemm %s: %s", cases[i].label, rc ? e.msg : msg);
        fails += !ok;
        gc_free(&g);
    }
    printf("     (%d GEMM cases)\n", n);
    d->close(d);
}

static void test_gemm_errors(void) {
    hyp_err e;
    float dummy[64] __attribute__((aligned(16)));
    const hyp_gemm base = {.m = 7, .n = 13, .k = 5, .lda = 7, .ldb = 5, .ldc = 7, .ldd = 7, .alpha = 1.0f,
                           .a = dummy, .b = dummy, .d = dummy};
    const hyp_gemm fp8 = {.transa = 1, .m = 16, .n = 16, .k = 16, .atype = HYP_DT_E4M3, .btype = HYP_DT_E4M3,
                          .dtype = HYP_DT_BF16, .lda = 16, .ldb = 16, .ldd = 16, .alpha = 1.0f, .a = dummy, .b = dummy, .d = dummy};
    struct {
        hyp_gemm g;
        const char *needle;
    } bad[40];
    int nb = 0;
#define BADCASE(base_, mod, needle_)                                                                                 \
    do {                                                                                                             \
        hyp_gemm g_ = base_;                                                                                         \
        mod;                                                                                                         \
        bad[nb].g = g_, bad[nb].needle = needle_, nb++;                                                              \
    } while (0)
    BADCASE(base, g_.k = 0, "at least 1");
    BADCASE(base, g_.transa = 2, "transa");
    BADCASE(base, g_.atype = (hyp_dtype)7, "unknown dtype");
    BADCASE(base, g_.compute = (hyp_gemm_compute)5, "compute");
    BADCASE(base, g_.epilogue = HYP_EPI__COUNT, "unknown epilogue");
    BADCASE(base, g_.btype = HYP_DT_BF16, "same type");
    BADCASE(base, g_.dtype = HYP_DT_BF16, "f32 output");
    BADCASE(base, (g_.atype = g_.btype = HYP_DT_BF16, g_.dtype = HYP_DT_E4M3), "f32 or bf16 output");
    BADCASE(base, (g_.atype = g_.btype = HYP_DT_BF16, g_.compute = HYP_GEMM_TF32), "tf32");
    BADCASE(base, g_.a_scale = dummy, "fp8 inputs only");
    BADCASE(base, g_.amax_d = dummy, "fp8 output only");
    BADCASE(base, g_.b = NULL, "pointers are required");
    BADCASE(base, g_.lda = 6, "lda 6 < 7");
    BADCASE(base, (g_.transa = 1, g_.lda = 4), "lda 4 < 5");
    BADCASE(base, g_.ldb = 4, "ldb");
    BADCASE(base, g_.ldd = 3, "ldd");
    BADCASE(base, g_.beta = 1.0f, "needs C");
    BADCASE(base, (g_.beta = 1.0f, g_.c = dummy, g_.ldc = 3), "ldc");
    BADCASE(base, (g_.beta = 1.0f, g_.c = dummy, g_.ldc = 8), "in place");
    BADCASE(base, g_.batch = -1, "batch");
    BADCASE(base, (g_.batch = 2, g_.stride_a = -1), "negative");
    BADCASE(base, (g_.batch = 2, g_.stride_d = 10), "overlap");
    BADCASE(base, (g_.batch = 2, g_.stride_d = 91, g_.epilogue = HYP_EPI_BIAS, g_.bias = dummy), "batch <= 1");
    BADCASE(base, g_.epilogue = HYP_EPI_BIAS, "bias pointer");
    BADCASE(base, g_.epilogue = HYP_EPI_BGRADB, "bias pointer");
    BADCASE(base, g_.epilogue = HYP_EPI_GELU_AUX, "aux pointer");
    BADCASE(base, (g_.epilogue = HYP_EPI_DGELU, g_.aux = dummy, g_.ldaux = 7), "multiple of 8");
    BADCASE(base, g_.workspace_bytes = 64, "workspace");
    BADCASE(fp8, g_.btype = HYP_DT_F32, "both inputs");
    BADCASE(fp8, g_.atype = g_.btype = HYP_DT_E5M2, "e5m2 x e5m2");
    BADCASE(fp8, g_.dtype = HYP_DT_E5M2, "e5m2 output");
    BADCASE(fp8, g_.transa = 0, "TN");
    BADCASE(fp8, g_.transb = 1, "TN");
    BADCASE(fp8, g_.lda = 24, "multiples of 16");
    BADCASE(fp8, (g_.a = (const char *)dummy + 4), "16-byte aligned");
    BADCASE(fp8, g_.compute = HYP_GEMM_TF32, "tf32");
    BADCASE(fp8, (g_.epilogue = HYP_EPI_BGRADB, g_.bias = dummy), "not available for fp8");
    BADCASE(fp8, (g_.dtype = HYP_DT_E4M3, g_.epilogue = HYP_EPI_GELU_AUX, g_.aux = dummy, g_.ldaux = 16), "f32 or bf16 output");
    BADCASE(fp8, g_.d_scale = dummy, "fp8 output only");
    int ok = 1;
    for (int i = 0; i < nb; i++) {
        int rc = hyp_gemm_validate(&bad[i].g, &e);
        if (rc != HYP_EINPUT || !strstr(e.msg, bad[i].needle)) {
            printf("    case %d: rc %d, \"%s\" (wanted \"%s\")\n", i, rc, rc ? e.msg : "", bad[i].needle);
            ok = 0;
        }
    }
    CHECK(ok, "%d invalid GEMM descriptors are refused with the rule they break (e.g. \"%s\")", nb, e.msg);
    CHECK(hyp_gemm_validate(NULL, &e) == HYP_EINPUT && hyp_gemm_validate(&base, &e) == HYP_OK && hyp_gemm_validate(&fp8, &e) == HYP_OK,
          "valid descriptors pass");
    CHECK(hyp_gemm_cpu(&bad[0].g, &e) == HYP_EINPUT, "hyp_gemm_cpu validates too");

    /* through the device: refused descriptors and host pointers */
    hyp_device *d = open_sim(NULL);
    int rc = d->gemm(d, &bad[12].g, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "lda"), "sim gemm refuses an invalid descriptor");
    rc = d->gemm(d, &base, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "gemm A") && strstr(e.msg, "not device memory"),
          "sim gemm refuses host pointers: %s", e.msg);
    float *dv;
    d->mem_alloc(d, (void **)&dv, 256 * 4, &e);
    hyp_gemm g = base;
    g.a = g.b = g.d = dv;
    rc = d->gemm(d, &g, NULL, &e);
    CHECK(rc == HYP_OK, "a descriptor whose operands lie in device memory is accepted");
    g.m = g.lda = g.ldd = 20; /* D: 12*20+20 floats > 256 */
    rc = d->gemm(d, &g, NULL, &e);
    CHECK(rc == HYP_EINPUT && strstr(e.msg, "gemm D") && strstr(e.msg, "overrun"), "an operand past the end of its block is refused: %s", e.msg);
    g = base, g.a = g.b = g.d = dv, g.epilogue = HYP_EPI_BIAS, g.bias = dummy;
    CHECK(d->gemm(d, &g, NULL, &e) == HYP_EINPUT && strstr(e.msg, "bias"), "a host bias pointer is refused");
    g = base, g.a = g.b = g.d = dv, g.epilogue = HYP_EPI_GELU_AUX, g.aux = dv, g.ldaux = 24;
    CHECK(d->gemm(d, &g, NULL, &e) == HYP_EINPUT && strstr(e.msg, "aux"), "an aux matrix past its block is refused");
    g = fp8, g.a = g.b = g.d = dv, g.k = 4, g.m = 4, g.n = 1, g.a_scale = dummy;
    CHECK(d->gemm(d, &g, NULL, &e) == HYP_EINPUT && strstr(e.msg, "a_scale"), "a host scale pointer is refused");
    g = fp8, g.a = g.b = g.d = dv, g.k = 4, g.m = 4, g.n = 1, g.workspace = dummy, g.workspace_bytes = 16;
    CHECK(d->gemm(d, &g, NULL, &e) == HYP_EINPUT && strstr(e.msg, "workspace"), "a host workspace is refused");
    CHECK(d->synchronize(d, &e) == HYP_OK, "the accepted GEMM ran");
    d->close(d);
}

/* ---- collectives ---------------------------------------------------------------------------- */

/* The collective checks for `world` ranks (1 in the main run; 2 or 3 under mpirun): a kernel on
 * a compute stream produces the data, the communication stream waits for its event. */
static void collectives(hyp_coll *c) {
    hyp_err e;
    int rank = hyp_coll_rank(c), world = hyp_coll_world(c);
    hyp_device *d = open_sim(NULL);
    hyp_module *m;
    hyp_stream *comp, *comm;
    hyp_event *ev;
    enum { CNT = 6 };
    float *buf, *send, *recv, h[CNT * 8];
    int rc = d->module_load(d, KERNELS, &m, &e) || d->stream_create(d, &comp, &e) || d->stream_create(d, &comm, &e) ||
             d->event_create(d, &ev, &e) || d->mem_alloc(d, (void **)&buf, CNT * 4, &e) ||
             d->mem_alloc(d, (void **)&send, CNT * 8 * 4, &e) || d->mem_alloc(d, (void **)&recv, CNT * 8 * 4, &e);
    if (rc) {
        CHECK(0, "rank %d: setup: %s", rank, e.msg);
        return;
    }
    if (world == 1) {
        rc = d->all_reduce(d, buf, CNT, HYP_DT_F32, HYP_RED_SUM, comm, &e);
        CHECK(rc == HYP_EINPUT && strstr(e.msg, "comm_init"), "a collective before comm_init is refused: %s", e.msg);
        CHECK(d->comm_init(d, NULL, &e) == HYP_EINPUT, "comm_init needs a communicator");
    }
    rc = d->comm_init(d, c, &e);
    CHECK(!rc, "rank %d/%d: comm_init (%s)", rank, world, hyp_coll_backend(c));
    /* all_reduce sum and max, ordered after the producing kernel by an event */
    rc = launch_fill(d, m, buf, (float)(rank + 1), CNT, comp, &e) || d->event_record(d, ev, comp, &e) ||
         d->event_wait(d, comm, ev, &e) || d->all_reduce(d, buf, CNT, HYP_DT_F32, HYP_RED_SUM, comm, &e) ||
         d->d2h(d, h, buf, CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    CHECK(!rc && all_eq(h, CNT, (float)(world * (world + 1) / 2)), "rank %d/%d: all_reduce sum after an event from the compute stream (%g)",
          rank, world, h[0]);
    rc = launch_fill(d, m, buf, (float)(rank + 1), CNT, comp, &e) || d->event_record(d, ev, comp, &e) ||
         d->event_wait(d, comm, ev, &e) || d->all_reduce(d, buf, CNT, HYP_DT_F32, HYP_RED_MAX, comm, &e) ||
         d->d2h(d, h, buf, CNT * 4, comm, &e) || d->synchronize(d, &e);
    CHECK(!rc && all_eq(h, CNT, (float)world), "rank %d/%d: all_reduce max (%g)", rank, world, h[0]);
    /* reduce_scatter: send[r*CNT + i] = 100 * rank + r*CNT + i */
    for (int i = 0; i < world * CNT; i++) h[i] = (float)(100 * rank + i);
    rc = d->h2d(d, send, h, (size_t)world * CNT * 4, comm, &e) || d->reduce_scatter(d, send, recv, CNT, HYP_DT_F32, comm, &e) ||
         d->d2h(d, h, recv, CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    int ok = !rc;
    for (int i = 0; i < CNT; i++) ok &= h[i] == (float)(100 * world * (world - 1) / 2 + world * (rank * CNT + i));
    CHECK(ok, "rank %d/%d: reduce_scatter", rank, world);
    /* all_gather, separate buffers and in place */
    for (int i = 0; i < CNT; i++) h[i] = (float)(10 * rank + i);
    rc = d->h2d(d, send, h, CNT * 4, comm, &e) || d->all_gather(d, send, recv, CNT, HYP_DT_F32, comm, &e) ||
         d->d2h(d, h, recv, (size_t)world * CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    ok = !rc;
    for (int r = 0; r < world; r++)
        for (int i = 0; i < CNT; i++) ok &= h[r * CNT + i] == (float)(10 * r + i);
    rc = d->memset(d, recv, 0, (size_t)world * CNT * 4, comm, &e) ||
         launch_fill(d, m, recv + rank * CNT, (float)(rank + 1), CNT, comm, &e) ||
         d->all_gather(d, recv + rank * CNT, recv, CNT * 2, HYP_DT_BF16, comm, &e) || /* bf16: moved as words */
         d->d2h(d, h, recv, (size_t)world * CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    for (int r = 0; r < world; r++) ok &= !rc && all_eq(h + r * CNT, CNT, (float)(r + 1));
    CHECK(ok, "rank %d/%d: all_gather (f32, and in place as bf16)", rank, world);
    /* broadcast from the last rank */
    for (int i = 0; i < CNT; i++) h[i] = (float)(rank == world - 1 ? 42 : -1);
    rc = d->h2d(d, buf, h, CNT * 4, comm, &e) || d->broadcast(d, buf, CNT, HYP_DT_F32, world - 1, comm, &e) ||
         d->d2h(d, h, buf, CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    CHECK(!rc && all_eq(h, CNT, 42.0f), "rank %d/%d: broadcast from rank %d", rank, world, world - 1);
    /* reduce to the last rank, in place (ZeRO-2's per-group reduction): the root holds the sum, the
     * others keep their values */
    for (int i = 0; i < CNT; i++) h[i] = (float)(rank + 1);
    rc = d->h2d(d, buf, h, CNT * 4, comm, &e) || d->reduce(d, buf, CNT, HYP_DT_F32, world - 1, comm, &e) ||
         d->d2h(d, h, buf, CNT * 4, comm, &e) || d->stream_synchronize(d, comm, &e);
    CHECK(!rc && all_eq(h, CNT, rank == world - 1 ? (float)(world * (world + 1) / 2) : (float)(rank + 1)),
          "rank %d/%d: reduce to rank %d", rank, world, world - 1);
    if (world == 1) {
        CHECK(d->reduce(d, buf, CNT, HYP_DT_F32, 1, NULL, &e) == HYP_EINPUT && strstr(e.msg, "root"), "a reduce root outside the world is refused");
        CHECK(d->all_reduce(d, buf, CNT, HYP_DT_BF16, HYP_RED_SUM, NULL, &e) == HYP_EINPUT && strstr(e.msg, "fp32 only"),
              "sim reduces fp32 only: %s", e.msg);
        CHECK(d->reduce_scatter(d, send, recv, CNT, HYP_DT_F32, NULL, &e) == HYP_OK &&
                  d->all_reduce(d, buf, CNT, (hyp_dtype)9, HYP_RED_SUM, NULL, &e) == HYP_EINPUT &&
                  d->all_reduce(d, buf, CNT, HYP_DT_F32, (hyp_redop)7, NULL, &e) == HYP_EINPUT,
              "unknown dtypes and reductions are refused");
        CHECK(d->all_gather(d, send, recv, 3, HYP_DT_BF16, NULL, &e) == HYP_EINPUT && strstr(e.msg, "multiples of 4"),
              "all_gather of 6 bytes is refused: %s", e.msg);
        CHECK(d->broadcast(d, buf, CNT, HYP_DT_F32, 1, NULL, &e) == HYP_EINPUT && strstr(e.msg, "root"), "a root outside the world is refused");
        CHECK(d->all_reduce(d, buf, CNT + 1, HYP_DT_F32, HYP_RED_SUM, NULL, &e) == HYP_EINPUT && strstr(e.msg, "overrun"),
              "a collective past the end of its buffer is refused");
        CHECK(d->all_gather(d, h, recv, CNT, HYP_DT_F32, NULL, &e) == HYP_EINPUT, "a host send buffer is refused");
    }
    d->close(d);
}

int main(int argc, char **argv) {
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/sim-cache", HYP_BINARY_DIR);
    setenv("HYP_SIM_CACHE", cache, 0);
    unsetenv("HYP_SIM_SHUFFLE");
    unsetenv("HYP_SIM_STREAM_ORDER");
    hyp_err e;
    hyp_coll *c = NULL;
    if (argc > 1 && !strcmp(argv[1], "--collectives")) { /* under mpirun: tests/gen/test_device_mpi.sh */
        if (hyp_coll_init(&argc, &argv, &c, &e)) {
            printf("FAIL hyp_coll_init: %s\n", e.msg);
            return 1;
        }
        collectives(c);
        printf("rank %d/%d: %d passed, %d failed\n", hyp_coll_rank(c), hyp_coll_world(c), g_pass, g_fail);
        int all = hyp_coll_all_ok(c, g_fail == 0);
        hyp_coll_finalize(c);
        return all ? 0 : 1;
    }
    test_open();
    test_memory();
    test_launch();
    test_streams();
    test_rounding();
    test_gemm();
    test_gemm_errors();
    if (hyp_coll_init(&argc, &argv, &c, &e)) {
        CHECK(0, "hyp_coll_init: %s", e.msg);
    } else {
        collectives(c);
        hyp_coll_finalize(c);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
