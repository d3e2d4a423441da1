/* test_standin_driver.c — every rule of the driver stand-in (tests/standins/cuda_standin.c), each
 * seen refusing a planted violation next to the legal call it differs from: a stand-in that
 * accepts everything would pass none of these. The stand-in is opened with dlopen as dev_cuda.c
 * opens it; its cubins are NVRTC builds of standin_kernels.cu with a kernels.json beside them.
 * Cases that poison the process (a sticky fault, a crash, another SM) run in a child started
 * from this program with the case's name. Never needs a GPU; never touches a real driver. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/hyp_test.h"
#include "device.h"
#include "standin.h"
#include "../../kernels/sim/sim_tmap.h"

#define STR(x) #x
#define XSTR(x) STR(x)
#define FUNCS(X)                                                                                                     \
    X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                 \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost)             \
    X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuModuleLoad)               \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuStreamCreate)               \
    X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy)                \
    X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuGetErrorName) X(hypsi_host_view)               \
    X(hypsi_enqueue) X(hypsi_stream_fault) X(hypsi_current_device) X(cuTensorMapEncodeTiled)
#define MEMBER(f) static __typeof__(f) *p_##f;
FUNCS(MEMBER)
#define LOAD(f)                                                                                                      \
    if (!(p_##f = (__typeof__(f) *)dlsym(h, XSTR(f)))) {                                                             \
        printf("FAIL the stand-in lacks %s\n", XSTR(f));                                                            \
        return -1;                                                                                                   \
    }

static char g_dir[512]; /* the kernels folder: cubins, PTX, kernels.json, the .cu */
static CUcontext g_ctx;

static int open_standin(void) {
    void *h = dlopen(HYP_STANDIN_DIR "/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen %s: %s\n", HYP_STANDIN_DIR "/libcuda.so.1", dlerror());
        return -1;
    }
    FUNCS(LOAD)
    return 0;
}

static int start(void) { /* init, device 0, its primary context current */
    CUdevice d;
    if (open_standin() || p_cuInit(0) || p_cuDeviceGet(&d, 0) || p_cuDevicePrimaryCtxRetain(&g_ctx, d) || p_cuCtxSetCurrent(g_ctx))
        return -1;
    return 0;
}

static int write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

/* NVRTC: standin_kernels.cu -> <dir>/<name> as a cubin for arch (or PTX when ptx). */
static int nvrtc_build(const char *arch, const char *name, int ptx) {
    size_t n = 0;
    FILE *f = fopen(HYP_SOURCE_DIR "/tests/standins/standin_kernels.cu", "rb");
    static char src[16384];
    if (f) n = fread(src, 1, sizeof src - 1, f), fclose(f);
    src[n] = 0;
    nvrtcProgram p;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt};
    if (nvrtcCreateProgram(&p, src, "standin_kernels.cu", 0, NULL, NULL) || nvrtcCompileProgram(p, 1, opts)) return -1;
    size_t sz = 0;
    if (ptx ? nvrtcGetPTXSize(p, &sz) : nvrtcGetCUBINSize(p, &sz)) return -1;
    char *b = malloc(sz);
    if (!b || (ptx ? nvrtcGetPTX(p, b) : nvrtcGetCUBIN(p, b))) return -1;
    char path[700];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    int rc = write_file(path, b, ptx ? sz - 1 : sz);
    free(b);
    nvrtcDestroyProgram(&p);
    return rc;
}

static const char *KERNELS_JSON =
    "{\"format\": \"hyperion-kernels\", \"version\": 1, \"files\": [\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"k90.cubin\", \"ptx\": \"k.ptx\", \"kernels\": [%s]},\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"k80.cubin\", \"kernels\": [%s]},\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"junk.cubin\", \"kernels\": [%s]},\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"stale.cubin\", \"kernels\": [%s, {\"name\": \"ghost\", \"params\": []}]},\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"regs.cubin\", \"kernels\": [%s]},\n"
    "{\"file\": \"standin_kernels.cu\", \"cubin\": \"sig.cubin\", \"kernels\": [%s]}]}\n";
static const char *DECLS =
    "{\"name\": \"fill\", \"params\": [{\"name\": \"out\", \"type\": \"float*\"}, {\"name\": \"v\", \"type\": \"float\"}, {\"name\": \"n\", \"type\": \"int\"}]},"
    "{\"name\": \"scale\", \"params\": [{\"name\": \"in\", \"type\": \"const float*\"}, {\"name\": \"out\", \"type\": \"float*\"}, {\"name\": \"a\", \"type\": \"float\"}, {\"name\": \"n\", \"type\": \"int\"}]},"
    "{\"name\": \"static_smem\", \"params\": [{\"name\": \"out\", \"type\": \"float*\"}]},"
    "{\"name\": \"dyn_smem\", \"params\": [{\"name\": \"out\", \"type\": \"float*\"}, {\"name\": \"n\", \"type\": \"int\"}]},"
    "{\"name\": \"deref\", \"params\": [{\"name\": \"p\", \"type\": \"const float*\"}, {\"name\": \"out\", \"type\": \"float*\"}]},"
    "{\"name\": \"bounded\", \"params\": [{\"name\": \"out\", \"type\": \"float*\"}]}";
/* DECLS with fill's n declared long: the manifest disagrees with the image's parameter table */
static const char *SIG_DECLS =
    "{\"name\": \"fill\", \"params\": [{\"name\": \"out\", \"type\": \"float*\"}, {\"name\": \"v\", \"type\": \"float\"}, {\"name\": \"n\", \"type\": \"long\"}]},"
    "{\"name\": \"scale\", \"params\": []}, {\"name\": \"static_smem\", \"params\": []}, {\"name\": \"dyn_smem\", \"params\": []},"
    "{\"name\": \"deref\", \"params\": []}, {\"name\": \"bounded\", \"params\": []}";

#include <elf.h>
/* Plants a register count: rewrites EIATTR_REGCOUNT of `kernel` in the cubin at path to regs. */
static int plant_regcount(const char *path, const char *kernel, unsigned regs) {
    FILE *f = fopen(path, "r+b");
    static char img[1 << 20];
    size_t n = f ? fread(img, 1, sizeof img, f) : 0;
    const Elf64_Ehdr *h = (const void *)img;
    const Elf64_Shdr *sh = (const void *)(img + h->e_shoff);
    const char *shstr = img + sh[h->e_shstrndx].sh_offset;
    unsigned sym = 0;
    int done = 0;
    for (int i = 0; n && i < h->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB) {
            const Elf64_Sym *s = (const void *)(img + sh[i].sh_offset);
            for (size_t j = 0; j < sh[i].sh_size / sizeof *s; j++)
                if (!strcmp(img + sh[sh[i].sh_link].sh_offset + s[j].st_name, kernel)) sym = (unsigned)j;
        }
    for (int i = 0; sym && i < h->e_shnum; i++) {
        if (strcmp(shstr + sh[i].sh_name, ".nv.info")) continue;
        unsigned char *d = (unsigned char *)img + sh[i].sh_offset;
        for (size_t k = 0; k + 4 <= sh[i].sh_size;) {
            if (d[k] != 4) { k += 4; continue; }
            unsigned sz = d[k + 2] | d[k + 3] << 8;
            uint32_t w[2];
            memcpy(w, d + k + 4, 8);
            if (d[k + 1] == 0x2f && w[0] == sym) w[1] = regs, memcpy(d + k + 4, w, 8), done = 1;
            k += 4 + sz;
        }
    }
    if (done) rewind(f), done = fwrite(img, 1, n, f) == n;
    if (f) fclose(f);
    return done ? 0 : -1;
}

static int make_kernels_dir(void) {
    char cmd[2200], path[700];
    snprintf(cmd, sizeof cmd, "cp %s/tests/standins/standin_kernels.cu %s/", HYP_SOURCE_DIR, g_dir);
    if (system(cmd)) return -1;
    if (nvrtc_build("sm_90", "k90.cubin", 0) || nvrtc_build("sm_80", "k80.cubin", 0) || nvrtc_build("compute_90", "k.ptx", 1)) return -1;
    snprintf(cmd, sizeof cmd, "cd %s && cp k90.cubin stale.cubin && cp k90.cubin unlisted.cubin && cp k90.cubin regs.cubin && cp k90.cubin sig.cubin", g_dir);
    if (system(cmd)) return -1;
    snprintf(path, sizeof path, "%s/regs.cubin", g_dir);
    if (plant_regcount(path, "fill", 72)) return -1; /* 72 x 1024 threads > 65536 registers */
    snprintf(path, sizeof path, "%s/junk.cubin", g_dir);
    if (write_file(path, "not an ELF image\n", 17)) return -1;
    char json[16384];
    snprintf(json, sizeof json, KERNELS_JSON, DECLS, DECLS, DECLS, DECLS, DECLS, SIG_DECLS);
    snprintf(path, sizeof path, "%s/kernels.json", g_dir);
    return write_file(path, json, strlen(json));
}

static CUmodule load(const char *name, CUresult *r) {
    char path[700];
    CUmodule m = NULL;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    *r = p_cuModuleLoad(&m, path);
    return m;
}

static const char *ename(CUresult r) {
    const char *s = NULL;
    p_cuGetErrorName(r, &s);
    return s ? s : "?";
}
#define EXPECT(call, want, what)                                                                                     \
    do {                                                                                                             \
        CUresult r_ = (call);                                                                                        \
        check(r_ == (want), what, "%s (want %s)", ename(r_), ename(want));                                           \
    } while (0)

static void sleep_op(void *ms) { usleep((useconds_t)(uintptr_t)ms * 1000); }

/* work a cuBLASLt/NCCL stand-in enqueues: it reads device memory through hypsi_host_view on the
 * stream's worker thread */
static CUdeviceptr g_probe;
static float g_probe_seen;
static void view_op(void *unused) {
    (void)unused;
    float *v = p_hypsi_host_view(g_probe, 4, "view_op");
    g_probe_seen = v ? *v : -1;
}

/* ---- cases run in a child process --------------------------------------------------------- */

static int child_case(const char *name) {
    if (!strcmp(name, "uninit")) { /* everything before cuInit */
        int n;
        if (open_standin()) return 3;
        return p_cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1;
    }
    if (!strcmp(name, "devices")) {
        int n = 0;
        CUdevice d;
        if (open_standin() || p_cuInit(0)) return 3;
        p_cuDeviceGetCount(&n);
        return n == 4 && p_cuDeviceGet(&d, 3) == CUDA_SUCCESS && p_cuDeviceGet(&d, 4) == CUDA_ERROR_INVALID_DEVICE ? 0 : 1;
    }
    if (start()) return 3;
    CUresult r;
    CUmodule m = load("k90.cubin", &r);
    CUfunction deref = NULL;
    if (m) p_cuModuleGetFunction(&deref, m, "deref");
    CUdeviceptr out;
    if (p_cuMemAlloc(&out, 64)) return 3;
    if (!strcmp(name, "host_read")) { /* must die of SIGSEGV */
        volatile float x = *(volatile float *)(uintptr_t)out;
        (void)x;
        return 0;
    }
    if (!strcmp(name, "host_ptr_kernel") || !strcmp(name, "freed_ptr_kernel")) {
        /* a kernel dereferencing a host (pageable) pointer, or a freed block: an illegal address,
         * sticky: the synchronize and every later call report it */
        static float host = 1;
        CUdeviceptr gone;
        if (!deref || p_cuMemAlloc(&gone, 64)) return 3;
        p_cuMemFree(gone);
        void *pp = !strcmp(name, "host_ptr_kernel") ? (void *)&host : (void *)(uintptr_t)gone;
        void *args[] = {&pp, &out};
        if (p_cuLaunchKernel(deref, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)) return 3;
        CUresult s1 = p_cuCtxSynchronize();
        CUdeviceptr more;
        CUresult s2 = p_cuMemAlloc(&more, 64);
        printf("sync %s, then alloc %s\n", ename(s1), ename(s2));
        return s1 == CUDA_ERROR_ILLEGAL_ADDRESS && s2 == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 1;
    }
    if (!strcmp(name, "stream_fault")) { /* hypsi_stream_fault: the cuBLASLt/NCCL stand-ins' async error */
        p_hypsi_stream_fault(NULL, CUDA_ERROR_LAUNCH_FAILED, "planted");
        return p_cuCtxSynchronize() == CUDA_ERROR_LAUNCH_FAILED && p_hypsi_enqueue(NULL, sleep_op, 0, NULL) == CUDA_ERROR_LAUNCH_FAILED ? 0 : 1;
    }
    if (!strcmp(name, "sm80")) { /* HYP_STANDIN_SM=80: an A100 */
        int major = 0, sms = 0, optin = 0;
        p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
        p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
        p_cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0);
        CUresult r90, r80;
        CUmodule m90 = load("k90.cubin", &r90), m80 = load("k80.cubin", &r80);
        CUfunction dyn = NULL;
        if (m80) p_cuModuleGetFunction(&dyn, m80, "dyn_smem");
        CUresult over = dyn ? p_cuFuncSetAttribute(dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 * 1024) : CUDA_ERROR_UNKNOWN;
        CUresult fits = dyn ? p_cuFuncSetAttribute(dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 160 * 1024) : CUDA_ERROR_UNKNOWN;
        printf("sm_%d0 %d SMs optin %d; sm_90 cubin %s, sm_80 cubin %s; 200 KB %s, 160 KB %s\n", major, sms, optin, ename(r90), ename(r80), ename(over), ename(fits));
        (void)m90;
        return major == 8 && sms == 108 && optin == 166912 && r90 == CUDA_ERROR_NO_BINARY_FOR_GPU && r80 == CUDA_SUCCESS &&
                       over == CUDA_ERROR_INVALID_VALUE && fits == CUDA_SUCCESS
                   ? 0
                   : 1;
    }
    return 2;
}

/* Runs this program on a case in a fresh process with env (NAME=VALUE or NULL); returns its
 * wait status. */
static int run_child(const char *name, const char *env) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (env) putenv((char *)env);
        execl("/proc/self/exe", "test_standin_driver", "--case", name, g_dir, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

/* ---- the cases in this process -------------------------------------------------------------- */

static void *other_thread(void *arg) { /* a thread that never made the context current */
    CUdeviceptr p;
    *(CUresult *)arg = p_cuMemAlloc(&p, 64);
    return NULL;
}

static void modules(void) {
    CUresult r;
    char path[700];
    CUmodule m;
    snprintf(path, sizeof path, "%s/missing.cubin", g_dir);
    EXPECT(p_cuModuleLoad(&m, path), CUDA_ERROR_FILE_NOT_FOUND, "module: a missing file");
    load("junk.cubin", &r);
    check(r == CUDA_ERROR_INVALID_IMAGE, "module: bytes that are no ELF cubin", "%s", ename(r));
    load("unlisted.cubin", &r);
    check(r == CUDA_ERROR_INVALID_IMAGE, "module: a cubin kernels.json does not name", "%s", ename(r));
    load("stale.cubin", &r);
    check(r == CUDA_ERROR_INVALID_IMAGE, "module: the manifest lists a kernel the image lacks", "%s", ename(r));
    load("sig.cubin", &r);
    check(r == CUDA_ERROR_INVALID_IMAGE, "module: the manifest's signature disagrees with the image's parameter table", "%s", ename(r));
    load("k80.cubin", &r);
    check(r == CUDA_ERROR_NO_BINARY_FOR_GPU, "module: an sm_80 cubin on the sm_90 device", "%s", ename(r));
    CUmodule ptx = load("k.ptx", &r);
    check(r == CUDA_SUCCESS, "module: PTX for compute_90 loads (JIT)", "%s", ename(r));
    if (ptx) p_cuModuleUnload(ptx);
    m = load("k90.cubin", &r);
    check(r == CUDA_SUCCESS, "module: the sm_90 cubin gen's manifest names loads", "%s", ename(r));
    CUfunction f;
    EXPECT(p_cuModuleGetFunction(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND, "module: an unknown kernel name");
    EXPECT(p_cuModuleGetFunction(&f, m, "fill"), CUDA_SUCCESS, "module: a kernel of the image");
    p_cuModuleUnload(m);
    EXPECT(p_cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE, "module: unloaded twice");
}

static void memory(CUmodule m) {
    CUdeviceptr a, b;
    float host[64] = {0};
    EXPECT(p_cuMemAlloc(&a, 256), CUDA_SUCCESS, "memory: cuMemAlloc");
    EXPECT(p_cuMemAlloc(&b, 256), CUDA_SUCCESS, "memory: a second block");
    check(a % 256 == 0 && b % 256 == 0, "memory: 256-byte aligned addresses", "%#llx %#llx", (unsigned long long)a, (unsigned long long)b);
    EXPECT(p_cuMemcpyHtoDAsync(a, host, 256, NULL), CUDA_SUCCESS, "memory: HtoD inside the block");
    EXPECT(p_cuMemcpyHtoDAsync(a + 8, host, 256, NULL), CUDA_ERROR_INVALID_VALUE, "memory: HtoD overrunning the block by 8 bytes");
    EXPECT(p_cuMemcpyDtoHAsync(host, a + 255, 2, NULL), CUDA_ERROR_INVALID_VALUE, "memory: DtoH straddling the block's end");
    EXPECT(p_cuMemcpyDtoDAsync(a, (CUdeviceptr)(uintptr_t)host, 16, NULL), CUDA_ERROR_INVALID_VALUE, "memory: a host pointer as DtoD source");
    EXPECT(p_cuMemcpyHtoDAsync(a, (const void *)(uintptr_t)b, 16, NULL), CUDA_ERROR_INVALID_VALUE, "memory: a device pointer as HtoD host source");
    EXPECT(p_cuMemsetD8Async(b + 256, 0, 1, NULL), CUDA_ERROR_INVALID_VALUE, "memory: memset one past the block");
    EXPECT(p_cuMemFree(a + 4), CUDA_ERROR_INVALID_VALUE, "memory: cuMemFree of an inner address");
    EXPECT(p_cuMemFree(a), CUDA_SUCCESS, "memory: cuMemFree");
    EXPECT(p_cuMemFree(a), CUDA_ERROR_INVALID_VALUE, "memory: cuMemFree twice");
    EXPECT(p_cuMemcpyHtoDAsync(a, host, 4, NULL), CUDA_ERROR_INVALID_VALUE, "memory: a copy into a freed block");
    check(p_hypsi_host_view(b, 256, "test") != NULL && p_hypsi_host_view(b, 257, "test") == NULL, "memory: hypsi_host_view only inside a live block", NULL);
    float four = 4;
    g_probe = b;
    p_cuMemcpyHtoDAsync(b, &four, 4, NULL);
    p_hypsi_enqueue(NULL, view_op, NULL, NULL);
    p_cuCtxSynchronize();
    check(g_probe_seen == 4, "memory: hypsi_host_view from work on a stream (its worker has the context), in stream order", "%g", g_probe_seen);
    /* fresh memory is NaN bytes, not zeros */
    float got[64];
    p_cuMemcpyDtoHAsync(got, b, 256, NULL);
    p_cuCtxSynchronize();
    check(got[1] != got[1] && got[63] != got[63], "memory: fresh allocations hold 0xFF bytes (NaN)", "%g", got[1]);
    /* a kernel sees the pointer it was given: fill then scale through the translated views */
    CUfunction fill, scale;
    p_cuModuleGetFunction(&fill, m, "fill");
    p_cuModuleGetFunction(&scale, m, "scale");
    CUdeviceptr x, y;
    p_cuMemAlloc(&x, 64 * 4), p_cuMemAlloc(&y, 64 * 4);
    float v = 3, a2 = 2;
    int n = 64;
    void *fa[] = {&x, &v, &n}, *sa[] = {&x, &y, &a2, &n};
    p_cuLaunchKernel(fill, 1, 1, 1, 64, 1, 1, 0, NULL, fa, NULL);
    p_cuLaunchKernel(scale, 2, 1, 1, 32, 1, 1, 0, NULL, sa, NULL);
    p_cuMemcpyDtoHAsync(got, y, 64 * 4, NULL);
    EXPECT(p_cuCtxSynchronize(), CUDA_SUCCESS, "memory: kernels run on device memory");
    check(got[0] == 6 && got[63] == 6, "memory: fill then scale gives 6", "%g %g", got[0], got[63]);
    p_cuMemFree(x), p_cuMemFree(y), p_cuMemFree(b);
    int st = run_child("host_read", NULL);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "memory: a host read of a device address dies of SIGSEGV", "status %#x", st);
    st = run_child("host_ptr_kernel", NULL);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memory: a kernel reading a pageable host pointer: sticky ILLEGAL_ADDRESS", "status %#x", st);
    st = run_child("freed_ptr_kernel", NULL);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memory: a kernel reading a freed block: sticky ILLEGAL_ADDRESS", "status %#x", st);
}

static void ordering(void) {
    CUstream s1, s2;
    CUevent ev, nt;
    p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    p_cuEventCreate(&ev, 0), p_cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING);
    CUdeviceptr d;
    p_cuMemAlloc(&d, 4096);
    unsigned char *pin;
    p_cuMemAllocHost((void **)&pin, 4096);
    unsigned char page[4096];
    /* 1. A missing event wait: s1 writes 7s after 30 ms of work, s2 reads without waiting -> stale */
    p_cuMemsetD8Async(d, 0, 4096, s1);
    p_cuStreamSynchronize(s1);
    p_hypsi_enqueue(s1, sleep_op, (void *)(uintptr_t)30, NULL);
    p_cuMemsetD8Async(d, 7, 4096, s1);
    memset(pin, 0xAA, 4096);
    p_cuMemcpyDtoHAsync(pin, d, 4096, s2);
    p_cuStreamSynchronize(s2);
    check(pin[0] == 0, "streams: no event wait: the reader sees the data before the write", "%d", pin[0]);
    p_cuCtxSynchronize();
    /* with the wait it sees the write */
    p_hypsi_enqueue(s1, sleep_op, (void *)(uintptr_t)30, NULL);
    p_cuMemsetD8Async(d, 9, 4096, s1);
    p_cuEventRecord(ev, s1);
    p_cuStreamWaitEvent(s2, ev, 0);
    p_cuMemcpyDtoHAsync(pin, d, 4096, s2);
    p_cuStreamSynchronize(s2);
    check(pin[0] == 9 && pin[4095] == 9, "streams: with cuStreamWaitEvent the reader sees the write", "%d", pin[0]);
    /* 2. A missing synchronize: a DtoH into pinned memory has not landed when the call returns */
    memset(pin, 0xAA, 4096);
    p_hypsi_enqueue(s1, sleep_op, (void *)(uintptr_t)30, NULL);
    p_cuMemcpyDtoHAsync(pin, d, 4096, s1);
    float ms;
    EXPECT(p_cuEventRecord(ev, s1), CUDA_SUCCESS, "events: record");
    EXPECT(p_cuEventElapsedTime(&ms, ev, ev), CUDA_ERROR_NOT_READY, "events: elapsed time of an event not reached yet");
    check(pin[0] == 0xAA, "streams: pinned DtoH without synchronize: the host buffer is not written yet", "%d", pin[0]);
    p_cuStreamSynchronize(s1);
    check(pin[0] == 9, "streams: after cuStreamSynchronize it is", "%d", pin[0]);
    EXPECT(p_cuEventElapsedTime(&ms, ev, ev), CUDA_SUCCESS, "events: elapsed time once reached");
    EXPECT(p_cuEventRecord(nt, s1), CUDA_SUCCESS, "events: record a DISABLE_TIMING event");
    p_cuEventSynchronize(nt);
    EXPECT(p_cuEventElapsedTime(&ms, ev, nt), CUDA_ERROR_INVALID_HANDLE, "events: elapsed time with a DISABLE_TIMING event");
    /* 3. Pageable memory: DtoH is synchronous, HtoD takes the bytes at the call */
    memset(page, 0xAA, sizeof page);
    p_hypsi_enqueue(s1, sleep_op, (void *)(uintptr_t)30, NULL);
    p_cuMemcpyDtoHAsync(page, d, 4096, s1);
    check(page[0] == 9, "streams: DtoH into pageable memory has landed when the call returns (synchronous)", "%d", page[0]);
    memset(page, 5, sizeof page);
    p_hypsi_enqueue(s1, sleep_op, (void *)(uintptr_t)30, NULL);
    p_cuMemcpyHtoDAsync(d, page, 4096, s1);
    memset(page, 6, sizeof page); /* after the call: the staged copy keeps 5 */
    memset(pin, 5, 4096);
    p_cuMemcpyHtoDAsync(d + 0, pin, 16, s1); /* pinned: read when it runs, so it sees the 8s below */
    memset(pin, 8, 16);
    p_cuMemcpyDtoHAsync(page, d, 4096, s1);
    check(page[100] == 5 && page[0] == 8, "streams: pageable HtoD copies at the call, pinned HtoD when it runs", "%d %d", page[100], page[0]);
    EXPECT(p_cuMemFreeHost(page), CUDA_ERROR_INVALID_VALUE, "memory: cuMemFreeHost of pageable memory");
    /* 4. handles */
    EXPECT(p_cuStreamDestroy(s2), CUDA_SUCCESS, "streams: destroy");
    EXPECT(p_cuStreamSynchronize(s2), CUDA_ERROR_INVALID_HANDLE, "streams: a destroyed stream");
    EXPECT(p_cuEventDestroy(nt), CUDA_SUCCESS, "events: destroy");
    EXPECT(p_cuEventRecord(nt, s1), CUDA_ERROR_INVALID_HANDLE, "events: record a destroyed event");
    EXPECT(p_cuStreamCreate(&s2, 0x80), CUDA_ERROR_INVALID_VALUE, "streams: unknown creation flags");
    CUresult other;
    pthread_t th;
    pthread_create(&th, NULL, other_thread, &other);
    pthread_join(th, NULL);
    check(other == CUDA_ERROR_INVALID_CONTEXT, "context: a thread without a current context is refused", "%s", ename(other));
    p_cuMemFreeHost(pin), p_cuMemFree(d);
    p_cuEventDestroy(ev), p_cuStreamDestroy(s1);
}

static void launches(CUmodule m) {
    CUfunction fill, st, dyn;
    p_cuModuleGetFunction(&fill, m, "fill");
    p_cuModuleGetFunction(&st, m, "static_smem");
    p_cuModuleGetFunction(&dyn, m, "dyn_smem");
    CUdeviceptr out;
    p_cuMemAlloc(&out, 64 * 1024);
    float v = 1;
    int n = 1024;
    void *fa[] = {&out, &v, &n};
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 1024, 1, 1, 0, NULL, fa, NULL), CUDA_SUCCESS, "launch: 1024 threads");
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 1025, 1, 1, 0, NULL, fa, NULL), CUDA_ERROR_INVALID_VALUE, "launch: 1025 threads");
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 8, 2, 65, 0, NULL, fa, NULL), CUDA_ERROR_INVALID_VALUE, "launch: block z 65");
    EXPECT(p_cuLaunchKernel(fill, 1, 65536, 1, 1, 1, 1, 0, NULL, fa, NULL), CUDA_ERROR_INVALID_VALUE, "launch: grid y 65536");
    EXPECT(p_cuLaunchKernel(fill, 0, 1, 1, 32, 1, 1, 0, NULL, fa, NULL), CUDA_ERROR_INVALID_VALUE, "launch: a zero grid");
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE, "launch: no kernelParams for 3 parameters");
    void *short_args[3] = {&out, &v, NULL};
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, NULL, short_args, NULL), CUDA_ERROR_INVALID_VALUE, "launch: 2 of the signature's 3 parameters");
    void *sa[] = {&out};
    /* sm_90 cubins declare 1 KB more per kernel (ptxas: "1024 bytes smem" for a kernel without
     * shared memory): counted as static, as cuFuncGetAttribute(SHARED_SIZE_BYTES) counts it */
    EXPECT(p_cuLaunchKernel(st, 1, 1, 1, 1024, 1, 1, 44032, NULL, sa, NULL), CUDA_SUCCESS, "launch: 5 KB static + 43 KB dynamic = 48 KB");
    EXPECT(p_cuLaunchKernel(st, 1, 1, 1, 1024, 1, 1, 44033, NULL, sa, NULL), CUDA_ERROR_INVALID_VALUE, "launch: 5 KB static + 43 KB + 1 dynamic");
    int big = 20000;
    void *da[] = {&out, &big};
    EXPECT(p_cuLaunchKernel(dyn, 1, 1, 1, 256, 1, 1, 80000, NULL, da, NULL), CUDA_ERROR_INVALID_VALUE, "launch: 80000 dynamic bytes without the attribute");
    EXPECT(p_cuFuncSetAttribute(dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449), CUDA_ERROR_INVALID_VALUE, "launch: attribute above sm_90's 227 KB opt-in");
    EXPECT(p_cuFuncSetAttribute(dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 80000), CUDA_SUCCESS, "launch: attribute 80000");
    EXPECT(p_cuLaunchKernel(dyn, 1, 1, 1, 256, 1, 1, 80000, NULL, da, NULL), CUDA_SUCCESS, "launch: 80000 dynamic bytes after the attribute");
    EXPECT(p_cuLaunchKernel(dyn, 1, 1, 1, 256, 1, 1, 80004, NULL, da, NULL), CUDA_ERROR_INVALID_VALUE, "launch: 4 bytes over the attribute");
    float got = 0;
    p_cuMemcpyDtoHAsync(&got, out, 4, NULL);
    EXPECT(p_cuCtxSynchronize(), CUDA_SUCCESS, "launch: the accepted launches ran");
    check(got == 19999, "launch: dyn_smem read its last dynamic float", "%g", got);
    CUfunction bounded, heavy;
    p_cuModuleGetFunction(&bounded, m, "bounded");
    EXPECT(p_cuLaunchKernel(bounded, 1, 1, 1, 128, 1, 1, 0, NULL, sa, NULL), CUDA_SUCCESS, "launch: 128 threads under __launch_bounds__(128)");
    EXPECT(p_cuLaunchKernel(bounded, 1, 1, 1, 64, 4, 1, 0, NULL, sa, NULL), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "launch: 256 threads over __launch_bounds__(128)");
    CUresult r;
    CUmodule rm = load("regs.cubin", &r);
    if (rm) p_cuModuleGetFunction(&heavy, rm, "fill");
    EXPECT(rm ? p_cuLaunchKernel(heavy, 1, 1, 1, 512, 1, 1, 0, NULL, fa, NULL) : r, CUDA_SUCCESS, "launch: 512 threads x 72 registers");
    EXPECT(rm ? p_cuLaunchKernel(heavy, 1, 1, 1, 1024, 1, 1, 0, NULL, fa, NULL) : r, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "launch: 1024 threads x 72 registers (planted REGCOUNT)");
    EXPECT(p_cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, (CUstream)(uintptr_t)0x1234, fa, NULL), CUDA_ERROR_INVALID_HANDLE, "launch: on a stream that does not exist");
    p_cuCtxSynchronize();
    if (rm) p_cuModuleUnload(rm);
    p_cuMemFree(out);
}

/* The device layer (runtime/device/dev_cuda.c) on the stand-in: its call sequences obey the rules
 * above (each check would fail on a dev_cuda.c that broke one). */
/* v2165 graphs through dev_cuda.c over the stand-in: a capture records and runs nothing, a replay
 * runs it (one host call), and each call the driver refuses during a capture (a synchronize, an
 * allocation, a synchronous or pageable copy) fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
 * invalidates the capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), leaving the device usable. */
static void graphs_v2165(hyp_device *d, hyp_module *m, float *x, float *y, hyp_stream *s) {
    hyp_err e;
    hyp_graph *g = NULL;
    float back[1024], host[1024] = {0};
    hyp_kargs f = {0}, sc = {0};
    hyp_kargs_ptr(&f, x), hyp_kargs_f32(&f, 7.0f), hyp_kargs_i32(&f, 1024);
    hyp_kargs_ptr(&sc, x), hyp_kargs_ptr(&sc, y), hyp_kargs_f32(&sc, 2.0f), hyp_kargs_i32(&sc, 1024);
    int rc = d->memset_sync(d, x, 0, sizeof back, &e) || d->memset_sync(d, y, 0, sizeof back, &e) || d->capture_begin(d, s, &e) ||
             d->launch(d, m, "fill", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &f, s, &e) ||
             d->launch(d, m, "scale", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &sc, s, &e) || d->capture_end(d, s, &g, &e) ||
             d->synchronize(d, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
    check(!rc && g && back[0] == 0 && back[1023] == 0, "v2165 dev_cuda: a capture (fill, scale) records and runs nothing", "%s", rc ? e.msg : "");
    if (rc || !g) return;
    unsigned long long c0 = d->calls;
    rc = d->graph_launch(d, g, s, &e) || d->stream_synchronize(d, s, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
    check(!rc && back[0] == 14 && back[1023] == 14 && d->calls == c0 + 2, "v2165 dev_cuda: the replay runs both launches in order as one host call", "%s y[0] %g calls +%llu", rc ? e.msg : "", back[0], d->calls - c0);
    struct {
        const char *what;
        int kind;
    } bad[] = {{"v2165 dev_cuda: stream_synchronize in a capture: refused, invalidates it", 0},
               {"v2165 dev_cuda: mem_alloc in a capture: refused, invalidates it", 1},
               {"v2165 dev_cuda: d2h_sync in a capture: refused, invalidates it", 2},
               {"v2165 dev_cuda: a pageable h2d in a capture: refused, invalidates it", 3}};
    for (int i = 0; i < 4; i++) {
        hyp_graph *g2 = NULL;
        void *p = NULL;
        hyp_err ie, ee;
        rc = d->capture_begin(d, s, &ie) || d->launch(d, m, "fill", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &f, s, &ie);
        int brc = rc ? rc
                 : bad[i].kind == 0 ? d->stream_synchronize(d, s, &ie)
                 : bad[i].kind == 1 ? d->mem_alloc(d, &p, 256, &ie)
                 : bad[i].kind == 2 ? d->d2h_sync(d, back, y, sizeof back, &ie)
                                    : d->h2d(d, x, host, sizeof host, s, &ie);
        int erc = d->capture_end(d, s, &g2, &ee);
        check(!rc && brc && strstr(ie.msg, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") && erc && !g2 && strstr(ee.msg, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
              bad[i].what, "%.90s / end: %.80s", brc ? ie.msg : "accepted", erc ? ee.msg : "a graph");
        if (p) d->mem_free(d, p, &ie);
    }
    rc = d->memset_sync(d, y, 0, sizeof back, &e) || d->graph_launch(d, g, s, &e) || d->graph_launch(d, g, s, &e) ||
         d->stream_synchronize(d, s, &e) || d->d2h_sync(d, back, y, sizeof back, &e);
    check(!rc && back[0] == 14, "v2165 dev_cuda: after the refusals the device and the graph still work (two replays)", "%s", rc ? e.msg : "");
    d->graph_destroy(d, g);
}

static void dev_layer(void) {
    setenv("HYP_CUDA_LIBDIR", HYP_STANDIN_DIR, 1);
    unsetenv("HYP_LIBCUDA");
    char rep[2048];
    hyp_dev_cuda_check_libs(rep, sizeof rep);
    check(strstr(rep, HYP_STANDIN_DIR "/libcuda.so.1: ok, every symbol") != NULL, "dev_cuda: check_libs finds every driver symbol in the stand-in", "%.120s", rep);
    hyp_device *d = NULL;
    hyp_err e;
    int rc = hyp_device_open("cuda", &d, &e);
    check(!rc && d->info.sm == 90 && strstr(d->info.name, "stand-in"), "dev_cuda: opens the stand-in from HYP_CUDA_LIBDIR", "%s", rc ? e.msg : d->info.name);
    if (rc) return;
    char path[700];
    hyp_module *m = NULL, *m80 = NULL;
    snprintf(path, sizeof path, "%s/k80.cubin", g_dir);
    rc = d->module_load(d, path, &m80, &e);
    check(rc && strstr(e.msg, "CUDA_ERROR_NO_BINARY_FOR_GPU"), "dev_cuda: an sm_80 cubin is refused with the driver's error", "%s", rc ? e.msg : "loaded");
    snprintf(path, sizeof path, "%s/k90.cubin", g_dir);
    rc = d->module_load(d, path, &m, &e);
    check(!rc, "dev_cuda: module_load of the sm_90 cubin", "%s", rc ? e.msg : "");
    if (rc) return d->close(d);
    float *x = NULL, *y = NULL, host[1024], back[1024];
    for (int i = 0; i < 1024; i++) host[i] = (float)i;
    hyp_stream *s1 = NULL, *s2 = NULL;
    hyp_event *e1 = NULL, *e2 = NULL;
    rc = d->mem_alloc(d, (void **)&x, sizeof host, &e) || d->mem_alloc(d, (void **)&y, sizeof host, &e) || d->stream_create(d, &s1, &e) ||
         d->stream_create(d, &s2, &e) || d->event_create(d, &e1, &e) || d->event_create(d, &e2, &e);
    check(!rc, "dev_cuda: memory, streams, events", "%s", rc ? e.msg : "");
    if (rc) return d->close(d);
    /* static + dynamic shared memory over 48 KB with the dynamic part under 48 KB: the launch must
     * raise the function's limit itself (cuFuncSetAttribute), or the driver refuses it */
    hyp_kargs a = {0};
    hyp_kargs_ptr(&a, y);
    rc = d->launch(d, m, "static_smem", HYP_DIM3(1, 1, 1), HYP_DIM3(1024, 1, 1), 48 * 1024 - 1024, &a, s1, &e);
    check(!rc, "dev_cuda: static 5 KB + dynamic 47 KB (under 48 KB alone) launches", "%s", rc ? e.msg : "");
    hyp_kargs b = {0};
    hyp_kargs_ptr(&b, y), hyp_kargs_i32(&b, 30000);
    rc = d->launch(d, m, "dyn_smem", HYP_DIM3(1, 1, 1), HYP_DIM3(256, 1, 1), 120000, &b, s1, &e);
    check(!rc, "dev_cuda: 120000 dynamic bytes launch (attribute raised)", "%s", rc ? e.msg : "");
    rc = d->launch(d, m, "dyn_smem", HYP_DIM3(1, 1, 1), HYP_DIM3(256, 1, 1), 240000, &b, s1, &e);
    check(rc && strstr(e.msg, "CUDA_ERROR_INVALID_VALUE"), "dev_cuda: 240000 dynamic bytes (over 227 KB) refused", "%s", rc ? e.msg : "launched");
    /* event-ordered work across streams, pinned copies, the synchronous forms */
    void *pin = NULL;
    hyp_kargs f = {0};
    hyp_kargs_ptr(&f, x), hyp_kargs_f32(&f, 2.5f), hyp_kargs_i32(&f, 1024);
    hyp_kargs sc = {0};
    hyp_kargs_ptr(&sc, x), hyp_kargs_ptr(&sc, y), hyp_kargs_f32(&sc, 2.0f), hyp_kargs_i32(&sc, 1024);
    float ms = -1;
    rc = d->host_alloc(d, &pin, sizeof host, &e) || d->h2d(d, x, host, sizeof host, s1, &e) || d->event_record(d, e1, s1, &e) ||
         d->launch(d, m, "fill", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &f, s1, &e) || d->event_record(d, e2, s1, &e) ||
         d->event_wait(d, s2, e2, &e) || d->launch(d, m, "scale", HYP_DIM3(4, 1, 1), HYP_DIM3(256, 1, 1), 0, &sc, s2, &e) ||
         d->d2h(d, pin, y, sizeof host, s2, &e) || d->stream_synchronize(d, s2, &e) || d->event_synchronize(d, e2, &e) ||
         d->event_elapsed_ms(d, e1, e2, &ms, &e);
    check(!rc && ((float *)pin)[0] == 5 && ((float *)pin)[1023] == 5 && ms >= 0, "dev_cuda: fill on s1, event, scale on s2, pinned d2h", "%s", rc ? e.msg : "");
    size_t fr = 0, tot = 0;
    rc = d->memset_sync(d, y, 0, sizeof host, &e) || d->d2d_sync(d, y, x, sizeof host, &e) || d->d2h_sync(d, back, y, sizeof back, &e) ||
         d->h2d_sync(d, x, host, sizeof host, &e) || d->mem_info(d, &fr, &tot, &e) || d->synchronize(d, &e);
    check(!rc && back[0] == 2.5f && back[1023] == 2.5f && fr <= tot, "dev_cuda: memset_sync, d2d_sync, d2h_sync, h2d_sync, mem_info", "%s", rc ? e.msg : "");
    rc = d->h2d(d, (char *)x + 4, host, sizeof host, s1, &e);
    check(rc == HYP_EINPUT && strstr(e.msg, "CUDA_ERROR_INVALID_VALUE"), "dev_cuda: an overrunning copy is refused as bad input", "%s", rc ? e.msg : "accepted");
    hyp_kargs none = {0};
    rc = d->launch(d, m, "no_such_kernel", HYP_DIM3(1, 1, 1), HYP_DIM3(32, 1, 1), 0, &none, NULL, &e);
    check(rc && strstr(e.msg, "CUDA_ERROR_NOT_FOUND"), "dev_cuda: an unknown kernel", "%s", rc ? e.msg : "launched");
    graphs_v2165(d, m, x, y, s1);
    d->host_free(d, pin, &e);
    d->event_destroy(d, e1), d->event_destroy(d, e2), d->stream_destroy(d, s1), d->stream_destroy(d, s2);
    d->mem_free(d, x, &e), d->mem_free(d, y, &e);
    d->module_unload(d, m);
    d->close(d);
}

/* cuTensorMapEncodeTiled (hyp/hopper.cuh's TMA): the map carries the block's read-write view (what
 * the simulated kernel reads), with the driver's argument checks and the stand-in's extent check. */
static void tensor_maps(void) {
    CUdeviceptr a;
    EXPECT(p_cuMemAlloc(&a, 64 * 40 * 2), CUDA_SUCCESS, "tensor map: cuMemAlloc");
    CUtensorMap map __attribute__((aligned(64)));
    cuuint64_t dims[2] = {64, 40}, str[1] = {128}, big[2] = {64, 41};
    cuuint32_t box[2] = {64, 8}, box257[2] = {257, 8}, es[2] = {1, 1};
    EXPECT(p_cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)(uintptr_t)a, dims, str, box, es,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           CUDA_SUCCESS, "tensor map: a 64x40 bf16 tensor with 128B swizzle encodes (v2114)");
    hyp_sim_tmap_fields f;
    memcpy(&f, &map, sizeof f);
    check(f.magic == HYP_SIM_TMAP_MAGIC && f.addr == (uint64_t)(uintptr_t)p_hypsi_host_view(a, 16, "test") && f.box[0] == 64 &&
              f.swizzle == HYP_TMAP_SWIZZLE_128B,
          "tensor map: it holds the block's read-write view and the box (v2114)", NULL);
    EXPECT(p_cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)(uintptr_t)a, big, str, box, es,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           CUDA_ERROR_INVALID_VALUE, "tensor map: dims reaching one row past the block");
    EXPECT(p_cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)(uintptr_t)a, dims, str, box257, es,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           CUDA_ERROR_INVALID_VALUE, "tensor map: a box dimension of 257");
    static unsigned char host[64 * 40 * 2] __attribute__((aligned(64)));
    EXPECT(p_cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, host, dims, str, box, es,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           CUDA_ERROR_INVALID_VALUE, "tensor map: a host pointer as the global address");
    EXPECT(p_cuMemFree(a), CUDA_SUCCESS, "tensor map: cuMemFree");
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--case")) {
        snprintf(g_dir, sizeof g_dir, "%s", argv[3]);
        return child_case(argv[2]);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s/standin_driver_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir) || make_kernels_dir()) {
        printf("FAIL cannot prepare the kernels folder %s (NVRTC)\n", g_dir);
        return 1;
    }
    int st = run_child("uninit", NULL);
    check(WIFEXITED(st) && !WEXITSTATUS(st), "context: calls before cuInit: NOT_INITIALIZED", "status %#x", st);
    setenv("HYP_STANDIN_DELAY_US", "200", 1);
    if (start()) {
        printf("FAIL the stand-in does not start\n");
        return 1;
    }
    int count = 0;
    p_cuDeviceGetCount(&count);
    check(count == 1, "device: one device by default", "%d", count);
    check(p_hypsi_current_device() == 0, "device: hypsi_current_device is the current context's", "%d", p_hypsi_current_device());
    CUdevice dv;
    EXPECT(p_cuDeviceGet(&dv, 1), CUDA_ERROR_INVALID_DEVICE, "device: ordinal 1 of 1");
    int major = 0, sms = 0;
    p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
    p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
    check(major == 9 && sms == 132, "device: an H100 by default (sm_90, 132 SMs)", "sm_%d0 %d", major, sms);
    modules();
    CUresult r;
    CUmodule m = load("k90.cubin", &r);
    if (!m) {
        printf("FAIL k90.cubin does not load\n");
        return 1;
    }
    memory(m);
    tensor_maps();
    ordering();
    launches(m);
    dev_layer();
    st = run_child("stream_fault", NULL);
    check(WIFEXITED(st) && !WEXITSTATUS(st), "faults: hypsi_stream_fault is sticky for every later call", "status %#x", st);
    st = run_child("sm80", "HYP_STANDIN_SM=80");
    check(WIFEXITED(st) && !WEXITSTATUS(st), "device: HYP_STANDIN_SM=80 is an A100 (108 SMs, 163 KB opt-in, sm_80 cubins only)", "status %#x", st);
    st = run_child("devices", "HYP_STANDIN_DEVICES=4");
    check(WIFEXITED(st) && !WEXITSTATUS(st), "device: HYP_STANDIN_DEVICES=4 gives ordinals 0..3, refuses 4", "status %#x", st);
    p_cuModuleUnload(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) printf("note: could not remove %s\n", g_dir);
    return hyp_test_finish();
}
