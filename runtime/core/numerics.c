/* numerics.c — small numerical rules every backend shares (cpu, device, sim are peers and take
 * them from here, never from one another). */
#include "numerics.h"

float op_mean_loss(const float *losses, const int32_t *targets, long n) {
    double s = 0;
    long cnt = 0;
    for (long i = 0; i < n; i++) {
        cnt += targets[i] >= 0;
        s += losses[i];
    }
    return cnt ? (float)(s / (double)cnt) : 0.0f;
}
