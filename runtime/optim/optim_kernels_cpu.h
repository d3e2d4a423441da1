/* optim_kernels_cpu.h — the optimizers' cpu kernels (optim_kernels_cpu.c). */
#ifndef HYP_OPTIM_KERNELS_CPU_H
#define HYP_OPTIM_KERNELS_CPU_H

/* One AdamW step over n contiguous values, bias-corrected, step t >= 1.
 * g is multiplied by grad_scale first (global-norm clipping factor); wd is decoupled weight decay
 * (p -= lr * wd * p), pass 0 for tensors that are not decayed. */
void op_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1,
              float beta2, float eps, float wd, int t, float grad_scale);
/* Muon's orthogonalization (v2138; Keller Jordan's zeropower_via_newtonschulz5, in fp32):
 * out[R,K] ~ U V^T of G[R,K] = U S V^T. With X = G (or G^T when R > K, so X is r x k, r <= k),
 * X /= ||X||_F + 1e-7, then `steps` times: A = X X^T, B = b A + c A A, X = a X + B X; out is X
 * (transposed back). The GEMMs go through oneDNN's sgemm. work: 2*R*K + 2*r*r floats, r =
 * min(R, K); out may not alias G. */
void op_newton_schulz5(float *out, const float *G, long R, long K, int steps, float a, float b, float c,
                       float *work);

#endif
