/* device_reg.c — the device registry: hyp_device_open finds an implementation of device.h by
 * kind. A new device layer is one file (dev_<kind>.c) and one line here. Never: shared helpers
 * (device.c) or anything an implementation calls back. */
#include <string.h>

#include "device.h"

static const struct {
    const char *kind;
    int (*open)(hyp_device **out, hyp_err *e);
} DEVICES[] = {
    {"sim", hyp_dev_sim_open},
    {"cuda", hyp_dev_cuda_open},
};

int hyp_device_open(const char *kind, hyp_device **out, hyp_err *e) {
    *out = NULL;
    for (size_t i = 0; kind && i < sizeof DEVICES / sizeof *DEVICES; i++)
        if (!strcmp(DEVICES[i].kind, kind)) return DEVICES[i].open(out, e);
    return hyp_fail(e, HYP_EINPUT, "unknown device kind '%s' — use \"cuda\" or \"sim\"", kind ? kind : "(null)");
}
