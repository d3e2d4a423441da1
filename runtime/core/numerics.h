/* numerics.h — numerical rules shared by every backend (see numerics.c). */
#ifndef HYP_NUMERICS_H
#define HYP_NUMERICS_H
#include <stdint.h>

/* The mean loss of a batch: the sum of losses[n] (an ignored target's is 0), in double, over the
 * count of targets >= 0; 0 when every target is ignored. Both executors' one definition. */
float op_mean_loss(const float *losses, const int32_t *targets, long n);

#endif
