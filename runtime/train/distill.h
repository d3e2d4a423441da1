/* distill.h — v2149 knowledge distillation on the cpu backend: a frozen teacher (a checkpoint of
 * ours with the plan.json it was trained under, or a Hugging Face model directory — GPT-2, Llama,
 * Qwen3, read by ckpt/hf.c — with distill.teacher_plan or else the student's plan; any model with
 * the student's vocabulary) runs
 * forward on each micro-batch inside the student's fused loss op (exec_t.loss_fused), and the loss
 * per token becomes alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) *
 * cross-entropy, with its gradient alpha * T * (softmax(student / T) - softmax(teacher / T)) +
 * (1 - alpha) * (softmax(student) - onehot), computed row by row (one token at a time, two
 * softmaxes streamed over the vocabulary in place: the B x T x V probabilities are never stored).
 * On a device backend (sim, cuda) the teacher runs forward on the device where kernels fit its
 * plan (train_backend_dev_teacher: a forward-only device executor, its logits handed to the
 * fused-loss kernel on the device), else on the host executor with its logits uploaded per
 * micro-batch (backend.h train_teacher); the kernel computes the same loss and gradient in fp32.
 * Data parallel: each rank's teacher runs on the rank's own batch (the loss is per token).
 * Never: the training loop.
 */
#ifndef HYP_DISTILL_H
#define HYP_DISTILL_H

#include "backend.h"
#include "exec.h"

typedef struct distill distill;

/* The plan's "distill" section (absent: *out = NULL, HYP_OK). Otherwise loads the teacher named
 * there for batches up to B x T of the student x, and hooks it into x's fused loss when the
 * backend trains in x's buffers (caps->host_buffers), else keeps it for distill_attach. Its plan: teacher_plan when
 * given; else the first plan.json in the teacher's directory or the three above; else, for a
 * Hugging Face directory, the student's plan (the config is checked against it key by key). */
int distill_open(distill **out, const char *plan_path, exec_t *x, const train_backend_caps *caps, hyp_err *e);
void distill_close(distill *d, exec_t *x);
/* Gives a device backend b the teacher (b->teacher, backend.h), on its device where kernels fit,
 * and prints (rank 0) where its forward runs; nothing for d NULL or the cpu backend (there
 * distill_open hooked the teacher into the executor's fused loss). */
int distill_attach(distill *d, train_backend *b, hyp_err *e);
/* One line for the banner: teacher, temperature, alpha. */
const char *distill_describe(const distill *d);

/* The per-row loss and gradient (exposed for the tests): student logits z[V] (turned into the
 * gradient in place, scaled by dloss), teacher logits zt[V], target y (< 0: only the KL term);
 * returns the row's loss. */
float distill_row(float *z, const float *zt, int y, int V, double temperature, double alpha, float dloss);

#endif
