/* gpu_probe.h — what the GPU tests share: is a GPU usable, detected independently of the device
 * layer (dlopen libcuda.so.1, cuInit, cuDeviceGetCount), so a broken dev_cuda.c cannot pass by
 * skipping. Header-only, as tests/unit/hyp_test.h. */
#ifndef HYP_GPU_PROBE_H
#define HYP_GPU_PROBE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* How many GPUs are usable (0: none, and why not in `why`). */
static int probe_gpu(char *why, size_t n) {
    const char *lib = getenv("HYP_LIBCUDA");
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "libcuda.so.1 not found: %s", dlerror());
        return 0;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int rc = init ? init(0) : -1, c = 0;
    if (rc) snprintf(why, n, "cuInit failed with CUresult %d (no device, or the driver cannot reach it)", rc);
    else if (!count || count(&c) || c == 0) snprintf(why, n, "no CUDA device");
    dlclose(h);
    return rc == 0 ? c : 0;
}

#endif
