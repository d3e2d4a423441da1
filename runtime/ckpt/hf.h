/* hf.h — Hugging Face model directories in and out: the weights of a plan's model under
 * transformers' own classes and layouts (`gen export`, `train --init-from`).
 *
 * Our checkpoints already use HF tensor names; what differs is layout and the config:
 *   GPT2LMHeadModel   Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored
 *                     [in, out]: the transpose of ours ([out, in], like nn.Linear)
 *   LlamaForCausalLM  the Llama-style plans without QK-norm (tied or not, GQA, RoPE theta)
 *   Qwen3ForCausalLM  the Llama-style plans with QK-norm (q_norm/k_norm per head, before RoPE);
 *                     as Llama they would load silently wrong, so they are never called Llama
 *   every arch        the vocabulary rows (wte / embed_tokens / lm_head) are V in HF, Vp (padded)
 *                     in our arena; the padding rows are written out never, read in as zeros
 *   MixtralForCausalLM  Llama-style plans whose every layer is a Mixtral MoE layer (softmax top-k renormalised;
 *                     docs/moe.md): our names are Mixtral's (block_sparse_moe.gate, experts.E.w1/w2/w3)
 * Plans with no transformers class (GPT-2 with RMSNorm or QK-norm, Llama with LayerNorm or GELU)
 * are refused by name. Never: writes a partial directory, or changes the caller's weights on error.
 */
#ifndef HYP_HF_H
#define HYP_HF_H

#include "hyp_err.h"
#include "plan.h"

/* Writes the plan's model as an HF model directory out_dir (config.json, model.safetensors in
 * F32, generation_config.json) from the checkpoint ckpt (a run's checkpoint directory, whose
 * `latest` is read, or one step directory; single-file or ZeRO-sharded, which is assembled).
 * out_dir must not exist (or be empty): it is built in a sibling temp dir and renamed into place. */
int hyp_hf_export(const char *ckpt, const plan_t *p, const char *out_dir, hyp_err *e);

/* Fills params (the plan's full parameter arena, p->param_floats floats) with the weights at path:
 * our checkpoint (directory with `latest`, or a step directory; any plan of the same model shape,
 * weights only) or an HF model directory (config.json + model.safetensors or
 * model.safetensors.index.json with its shards; F32, BF16 or F16 tensors). The config and every
 * tensor are checked first (a mismatch names the key or tensor and both values/shapes); on error
 * params is untouched. *what (may be NULL) receives a short description of what was loaded. */
int hyp_hf_init_from(const char *path, const plan_t *p, float *params, char *what, size_t what_cap, hyp_err *e);

/* Whether dir holds one of our checkpoints (`latest` or state.json). */
int hyp_hf_is_our_ckpt(const char *dir);

#endif
