/* hf.c — Hugging Face model directories in and out (see hf.h): the HF class and config.json of a
 * plan's model, the layout map between our parameter arena and HF's tensors (Conv1D transposes,
 * vocabulary padding), `gen export` (a checkpoint -> a staged, renamed HF directory) and
 * `train --init-from` (an HF directory or our checkpoint -> the parameter arena).
 * Never: writes into the caller's weights or the output directory before everything is checked.
 */
#include "hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "fsio.h"
#include "op_registry.h"
#include "safetensors.h"

enum { HF_GPT2, HF_LLAMA, HF_QWEN3, HF_MIXTRAL };
static const char *const HF_CLASS[] = {"GPT2LMHeadModel", "LlamaForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM"};
static const char *const HF_TYPE[] = {"gpt2", "llama", "qwen3", "mixtral"};

#define HF_MAX_FILES 64

/* The model facts an HF config needs, from the plan (eps and theta live on the plan's ops). */
typedef struct {
    int kind;
    double eps, theta;
    int E, K, H;     /* Mixtral: experts, top_k, expert width (the moe ops' attributes) */
    double aux_coef; /* Mixtral: router_aux_loss_coef */
} hf_model;

static const char *fmt7(double v) {
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "%.7g", v);
    return buf;
}

static int hf_model_of(const plan_t *p, hf_model *m, hyp_err *e) {
    memset(m, 0, sizeof *m);
    int gpt2 = !strcmp(p->arch, "gpt2"), llama = !strcmp(p->arch, "llama");
    if (gpt2 && !strcmp(p->norm, "layernorm") && !p->qk_norm && !strcmp(p->position, "learned") && p->bias)
        m->kind = HF_GPT2;
    else if (llama && !strcmp(p->norm, "rmsnorm") && !strcmp(p->activation, "swiglu") && !strcmp(p->position, "rope") &&
             !p->bias)
        m->kind = p->qk_norm ? HF_QWEN3 : HF_LLAMA;
    else
        return hyp_fail(e, HYP_EINPUT, "model %s (arch %s, norm %s, activation %s, position %s%s%s): no Hugging Face class "
                        "computes this model — export and import support GPT-2 (LayerNorm, learned positions, biases), "
                        "Llama (RMSNorm, SwiGLU, RoPE) and Llama with QK-norm (as Qwen3)",
                        p->model_name, p->arch, p->norm, p->activation, p->position, p->qk_norm ? ", QK-norm" : "",
                        p->bias ? ", biases" : "");
    /* a mixture of experts (moe ops, docs/moe.md) is MixtralForCausalLM when every layer is an MoE
     * layer with Mixtral's routing (softmax top-k renormalised); its names are Mixtral's already */
    int n_moe = 0, renorm = 1;
    const char *unlike = NULL; /* a routing feature transformers' Mixtral does not have */
    for (int i = 0; i < p->n_fwd; i++)
        if (p->fwd[i].op == hyp_op_find("moe_fwd")) {
            const plan_op *o = &p->fwd[i];
            n_moe++, renorm &= o->norm_topk == 1;
            if (o->capacity > 0) unlike = "a capacity factor (token dropping; Mixtral is dropless)";
            if (o->Hs > 0) unlike = "shared experts";
            if (o->sigmoid) unlike = "a sigmoid router";
            m->E = (int)o->E, m->K = (int)o->K, m->H = (int)o->H, m->aux_coef = o->aux_coef;
        }
    if (n_moe && (m->kind != HF_LLAMA || n_moe != p->L || !renorm || unlike))
        return hyp_fail(e, HYP_EINPUT, "model %s is a mixture of experts that MixtralForCausalLM does not compute (%s) — export and import "
                        "support Mixtral-shaped MoE models: every layer MoE, top_k weights renormalised, no QK-norm",
                        p->model_name, n_moe != p->L ? "dense layers" : !renorm ? "top_k weights not renormalised" : unlike ? unlike : "QK-norm");
    if (n_moe) m->kind = HF_MIXTRAL;
    if (m->kind == HF_MIXTRAL) m->aux_coef = strtod(fmt7(m->aux_coef), NULL);
    for (int i = 0; i < p->n_fwd && (!m->eps || !m->theta); i++) {
        if (!m->eps && p->fwd[i].eps > 0) m->eps = p->fwd[i].eps;
        if (!m->theta && p->fwd[i].theta > 0) m->theta = p->fwd[i].theta;
    }
    /* the plan's ops hold floats: 1e-5 reads back as 9.99999974e-06; keep 7 digits */
    m->eps = strtod(fmt7(m->eps), NULL), m->theta = strtod(fmt7(m->theta), NULL);
    if (!m->eps) m->eps = 1e-5;
    if (!m->theta) m->theta = 10000.0;
    return HYP_OK;
}

/* How one of our parameters is laid out in HF: transposed (GPT-2 Conv1D) and/or cut to V rows. */
typedef struct {
    int transpose, vocab;
    int ndim;
    int64_t shape[2];        /* HF's shape (ndim 1 or 2) */
} hf_layout;

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static void layout_of(const plan_t *p, const hf_model *m, const plan_param *pp, hf_layout *l) {
    memset(l, 0, sizeof *l);
    l->ndim = pp->ndim;
    for (int d = 0; d < pp->ndim && d < 2; d++) l->shape[d] = pp->shape[d];
    const char *n = pp->name;
    if (pp->ndim == 2 && (ends_with(n, "wte.weight") || ends_with(n, "embed_tokens.weight") || !strcmp(n, "lm_head.weight")) &&
        pp->shape[0] == p->Vp) {
        l->vocab = 1;
        l->shape[0] = p->V;
    }
    if (m->kind == HF_GPT2 && pp->ndim == 2 &&
        (ends_with(n, "attn.c_attn.weight") || ends_with(n, "attn.c_proj.weight") || ends_with(n, "mlp.c_fc.weight") ||
         ends_with(n, "mlp.c_proj.weight"))) {
        l->transpose = 1;
        l->shape[0] = pp->shape[1], l->shape[1] = pp->shape[0];
    }
}

static void shape_str(int ndim, const int64_t *s, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

/* HF tensor src (HF layout, fp32) -> our arena at dst; padding rows zero. */
static void hf_to_ours(const plan_param *pp, const hf_layout *l, const float *src, float *dst) {
    if (l->transpose) { /* src [in, out] -> dst [out, in] */
        int64_t in = l->shape[0], out = l->shape[1];
        for (int64_t i = 0; i < in; i++)
            for (int64_t o = 0; o < out; o++) dst[o * in + i] = src[i * out + o];
        return;
    }
    int64_t hf_n = hyp_st_numel(l->ndim, l->shape);
    memcpy(dst, src, sizeof(float) * (size_t)hf_n);
    if (hf_n < pp->numel) memset(dst + hf_n, 0, sizeof(float) * (size_t)(pp->numel - hf_n));
}

/* Our arena src -> HF layout at dst. */
static void ours_to_hf(const hf_layout *l, const float *src, float *dst) {
    if (l->transpose) {
        int64_t in = l->shape[0], out = l->shape[1];
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++) dst[i * out + o] = src[o * in + i];
        return;
    }
    memcpy(dst, src, sizeof(float) * (size_t)hyp_st_numel(l->ndim, l->shape));
}

/* ---- config.json ---------------------------------------------------------------------------- */

static cJSON *config_json(const plan_t *p, const hf_model *m) {
    cJSON *j = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(HF_CLASS[m->kind]));
    cJSON_AddStringToObject(j, "model_type", HF_TYPE[m->kind]);
    cJSON_AddNumberToObject(j, "vocab_size", p->V);
    if (m->kind == HF_GPT2) {
        cJSON_AddNumberToObject(j, "n_embd", p->C);
        cJSON_AddNumberToObject(j, "n_layer", p->L);
        cJSON_AddNumberToObject(j, "n_head", p->NH);
        cJSON_AddNumberToObject(j, "n_inner", p->H);
        cJSON_AddNumberToObject(j, "n_positions", p->maxT);
        cJSON_AddNumberToObject(j, "n_ctx", p->maxT);
        cJSON_AddStringToObject(j, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(j, "layer_norm_epsilon", m->eps);
        cJSON_AddNumberToObject(j, "resid_pdrop", 0);
        cJSON_AddNumberToObject(j, "embd_pdrop", 0);
        cJSON_AddNumberToObject(j, "attn_pdrop", 0);
        cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    } else {
        cJSON_AddNumberToObject(j, "hidden_size", p->C);
        cJSON_AddNumberToObject(j, "intermediate_size", m->kind == HF_MIXTRAL ? m->H : p->H);
        cJSON_AddNumberToObject(j, "num_hidden_layers", p->L);
        cJSON_AddNumberToObject(j, "num_attention_heads", p->NH);
        cJSON_AddNumberToObject(j, "num_key_value_heads", p->NKV);
        cJSON_AddNumberToObject(j, "head_dim", p->hd);
        cJSON_AddNumberToObject(j, "max_position_embeddings", p->maxT);
        cJSON_AddNumberToObject(j, "rms_norm_eps", m->eps);
        cJSON_AddNumberToObject(j, "rope_theta", m->theta);
        cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters"); /* transformers >= 5 reads this */
        cJSON_AddNumberToObject(rp, "rope_theta", m->theta);
        cJSON_AddStringToObject(rp, "rope_type", "default");
        cJSON_AddStringToObject(j, "hidden_act", "silu");
        cJSON_AddBoolToObject(j, "attention_bias", 0);
        cJSON_AddNumberToObject(j, "attention_dropout", 0);
        if (m->kind == HF_LLAMA) cJSON_AddBoolToObject(j, "mlp_bias", 0);
        else if (m->kind == HF_QWEN3) cJSON_AddBoolToObject(j, "use_sliding_window", 0);
        if (m->kind == HF_MIXTRAL) {
            cJSON_AddNumberToObject(j, "num_local_experts", m->E);
            cJSON_AddNumberToObject(j, "num_experts_per_tok", m->K);
            cJSON_AddNumberToObject(j, "router_aux_loss_coef", m->aux_coef);
            cJSON_AddBoolToObject(j, "output_router_logits", 0);
            cJSON_AddNumberToObject(j, "router_jitter_noise", 0);
            cJSON_AddNullToObject(j, "sliding_window");
        }
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", p->tied);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddStringToObject(j, "hyperion_model", p->model_name);
    return j;
}

/* ---- export --------------------------------------------------------------------------------- */

static int write_json(const char *path, cJSON *j, hyp_err *e) {
    char *txt = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!txt) return hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    size_t n = strlen(txt);
    char *buf = malloc(n + 2);
    int rc = buf ? HYP_OK : hyp_fail(e, HYP_EFAIL, "%s: out of memory", path);
    if (!rc) {
        memcpy(buf, txt, n);
        buf[n] = '\n';
        rc = hyp_fs_write_atomic(path, buf, n + 1, e);
    }
    free(buf);
    free(txt);
    return rc;
}

/* Removes the staging directory's files and itself (flat: export writes no subdirectories). */
static int allow_any(const char *name) {
    (void)name;
    return 1;
}

static void rm_stage(const char *dir) {
    if (hyp_fs_remove_flat(dir, allow_any) == 0) rmdir(dir);
}

static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}

/* The plan's parameters as checkpoint tensors over the full arena `base`. */
static hyp_ckpt_tensor *arena_tensors(const plan_t *p, float *base) {
    hyp_ckpt_tensor *t = calloc((size_t)p->n_params_t, sizeof *t);
    for (int i = 0; t && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        t[i].name = pp->name;
        t[i].data = base + pp->offset;
        t[i].ndim = pp->ndim;
        for (int d = 0; d < pp->ndim; d++) t[i].shape[d] = pp->shape[d];
    }
    return t;
}

/* Our checkpoint at dir (any plan of this model shape: no config-hash check) into base. */
static int load_our_ckpt(const char *dir, const plan_t *p, float *base, hyp_ckpt_state *st, hyp_err *e) {
    hyp_ckpt_tensor *t = arena_tensors(p, base);
    if (!t) return hyp_fail(e, HYP_EFAIL, "out of memory for the checkpoint's tensors");
    int rc = hyp_ckpt_load(dir, NULL, t, NULL, 0, p->n_params_t, NULL, st, e);
    free(t);
    return rc;
}

int hyp_hf_is_our_ckpt(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/latest", dir);
    if (hyp_fs_exists(path)) return 1;
    snprintf(path, sizeof path, "%s/state.json", dir);
    return hyp_fs_exists(path);
}

int hyp_hf_export(const char *ckpt, const plan_t *p, const char *out_dir, hyp_err *e) {
    hf_model m;
    int rc = hf_model_of(p, &m, e);
    if (rc) return rc;
    if (hyp_fs_exists(out_dir) && !(hyp_fs_is_dir(out_dir) && dir_is_empty(out_dir)))
        return hyp_fail(e, HYP_EINPUT, "%s: already exists — export into a new directory (or remove it first)", out_dir);
    if (!hyp_hf_is_our_ckpt(ckpt))
        return hyp_fail(e, HYP_EINPUT, "%s: not a Hyperion checkpoint (no latest, no state.json) — give a trainer's --ckpt-dir or one of its step_* directories",
                        ckpt);
    float *base = calloc((size_t)p->param_floats, sizeof(float));
    float *hf = calloc((size_t)p->param_floats, sizeof(float));
    hyp_st_tensor *ts = calloc((size_t)p->n_params_t, sizeof *ts);
    if (!base || !hf || !ts) {
        free(base), free(hf), free(ts);
        return hyp_fail(e, HYP_EFAIL, "out of memory for the weights of %s", p->model_name);
    }
    hyp_ckpt_state st;
    rc = load_our_ckpt(ckpt, p, base, &st, e);
    if (rc == HYP_ENOCKPT) rc = HYP_EINPUT;
    int n = 0;
    for (int i = 0; !rc && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        hf_layout l;
        layout_of(p, &m, pp, &l);
        ours_to_hf(&l, base + pp->offset, hf + pp->offset);
        ts[n] = (hyp_st_tensor){.name = pp->name, .dtype = HYP_ST_F32, .ndim = l.ndim, .data = hf + pp->offset};
        memcpy(ts[n].shape, l.shape, sizeof l.shape);
        n++;
    }
    char stage[4200] = {0}, path[4300];
    if (!rc) {
        char parent[4096];
        hyp_fs_dirname(out_dir, parent, sizeof parent);
        if ((rc = hyp_fs_mkdirs(parent, e)) == HYP_OK) {
            snprintf(stage, sizeof stage, "%s.tmp-XXXXXX", out_dir);
            if (!mkdtemp(stage)) {
                rc = hyp_fail(e, HYP_EFAIL, "%s: cannot create a staging directory (%s)", stage, strerror(errno));
                stage[0] = 0;
            }
        }
    }
    if (!rc) {
        hyp_st_meta meta[2] = {{"format", "pt"}, {"hyperion_step", NULL}};
        char step[32];
        snprintf(step, sizeof step, "%llu", (unsigned long long)st.step);
        meta[1].value = step;
        snprintf(path, sizeof path, "%s/model.safetensors", stage);
        rc = hyp_st_write(path, ts, n, meta, 2, NULL, e);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", stage);
        rc = write_json(path, config_json(p, &m), e);
    }
    if (!rc) {
        cJSON *g = cJSON_CreateObject();
        cJSON_AddBoolToObject(g, "do_sample", 0);
        cJSON_AddNumberToObject(g, "max_length", p->maxT);
        snprintf(path, sizeof path, "%s/generation_config.json", stage);
        rc = write_json(path, g, e);
    }
    if (!rc) {
        if (hyp_fs_is_dir(out_dir)) rmdir(out_dir); /* empty (checked above) */
        if (rename(stage, out_dir))
            rc = hyp_fail(e, HYP_EFAIL, "%s: cannot rename the staged export into place (%s)", out_dir, strerror(errno));
        else
            hyp_fs_fsync_parent(out_dir);
    }
    if (rc && stage[0]) rm_stage(stage);
    free(base), free(hf), free(ts);
    return rc;
}

/* ---- import --------------------------------------------------------------------------------- */

/* An HF directory's safetensors files and its config. */
typedef struct {
    hyp_st_file *f[HF_MAX_FILES];
    int nf;
    cJSON *cfg;
} hf_dir;

static void hf_dir_close(hf_dir *h) {
    for (int i = 0; i < h->nf; i++) hyp_st_close(h->f[i]);
    cJSON_Delete(h->cfg);
    memset(h, 0, sizeof *h);
}

static int read_json(const char *path, cJSON **out, hyp_err *e) {
    char *txt = NULL;
    size_t n = 0;
    int rc = hyp_fs_read_small(path, 64u << 20, &txt, &n, e);
    if (rc) return rc;
    *out = cJSON_ParseWithLength(txt, n);
    free(txt);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return hyp_fail(e, HYP_EINPUT, "%s: not a JSON object — the model directory is damaged", path);
    }
    return HYP_OK;
}

static int hf_dir_open(const char *dir, hf_dir *h, hyp_err *e) {
    memset(h, 0, sizeof *h);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = read_json(path, &h->cfg, e);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (hyp_fs_exists(path)) {
        if ((rc = hyp_st_open(path, &h->f[0], e))) return rc;
        h->nf = 1;
        return HYP_OK;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!hyp_fs_exists(path))
        return hyp_fail(e, HYP_EINPUT, "%s: neither model.safetensors nor model.safetensors.index.json — save the model with save_pretrained(..., safe_serialization=True)",
                        dir);
    cJSON *idx = NULL;
    if ((rc = read_json(path, &idx, e))) return rc;
    cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *it;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(idx);
        return hyp_fail(e, HYP_EINPUT, "%s: no weight_map object — the index is damaged", path);
    }
    cJSON_ArrayForEach(it, wm) {
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || !strcmp(it->valuestring, "..")) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: weight_map['%.200s'] is not a file name in the directory — the index is damaged", path, it->string);
            break;
        }
        int seen = 0;
        for (int i = 0; i < h->nf && !seen; i++) {
            const char *p = hyp_st_path(h->f[i]), *slash = strrchr(p, '/');
            seen = !strcmp(slash ? slash + 1 : p, it->valuestring);
        }
        if (seen) continue;
        if (h->nf == HF_MAX_FILES) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: more than %d shard files — merge the shards (save_pretrained with a larger max_shard_size)", path, HF_MAX_FILES);
            break;
        }
        char sp[4400];
        snprintf(sp, sizeof sp, "%s/%s", dir, it->valuestring);
        if ((rc = hyp_st_open(sp, &h->f[h->nf], e))) break;
        h->nf++;
    }
    cJSON_Delete(idx);
    return rc;
}

static const hyp_st_tensor *hf_find(const hf_dir *h, const char *name, int *file) {
    for (int i = 0; i < h->nf; i++) {
        const hyp_st_tensor *t = hyp_st_find(h->f[i], name);
        if (t) {
            *file = i;
            return t;
        }
    }
    return NULL;
}

/* config.json number at key (or alt, or inside "rope_parameters"); NAN if absent. */
static double cfg_num(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v && !strcmp(key, "rope_theta")) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
        v = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    }
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int check_key(const char *where, const cJSON *cfg, const char *key, double want, int required, double rtol, hyp_err *e) {
    double v = cfg_num(cfg, key);
    if (isnan(v)) {
        if (!required) return HYP_OK;
        return hyp_fail(e, HYP_EINPUT, "%s: no numeric '%s' — the config is not a complete %s config", where, key, "model");
    }
    if (fabs(v - want) > rtol * fabs(want))
        return hyp_fail(e, HYP_EINPUT, "%s: %s is %g, this trainer's plan has %g — generate a trainer for this model's shape (a model YAML with these dims)",
                        where, key, v, want);
    return HYP_OK;
}

static int hf_tied(const cJSON *cfg) {
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    return tie ? cJSON_IsTrue(tie) : 1; /* transformers' default */
}

static int check_config(const char *dir, const cJSON *cfg, const plan_t *p, const hf_model *m, hyp_err *e) {
    char where[4200];
    snprintf(where, sizeof where, "%s/config.json", dir);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : "(none)";
    if (strcmp(type, HF_TYPE[m->kind]))
        return hyp_fail(e, HYP_EINPUT, "%s: model_type is '%s', this trainer's plan is a %s model (%s) — load a %s checkpoint, or generate a trainer for this model",
                        where, type, HF_TYPE[m->kind], HF_CLASS[m->kind], HF_TYPE[m->kind]);
    int rc = check_key(where, cfg, "vocab_size", p->V, 1, 0, e);
    if (m->kind == HF_GPT2) {
        if (!rc) rc = check_key(where, cfg, "n_embd", p->C, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "n_layer", p->L, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "n_head", p->NH, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "n_inner", p->H, 0, 0, e);
        if (!rc) rc = check_key(where, cfg, "layer_norm_epsilon", m->eps, 0, 1e-6, e);
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "activation_function");
        if (!rc && cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") && strcmp(act->valuestring, "gelu_pytorch_tanh"))
            rc = hyp_fail(e, HYP_EINPUT, "%s: activation_function is '%.60s', this trainer computes tanh-GELU (gelu_new) — use a gelu_new model",
                          where, act->valuestring);
    } else {
        if (!rc) rc = check_key(where, cfg, "hidden_size", p->C, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "num_hidden_layers", p->L, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "num_attention_heads", p->NH, 1, 0, e);
        if (!rc) rc = check_key(where, cfg, "num_key_value_heads", p->NKV, 0, 0, e);
        if (!rc) rc = check_key(where, cfg, "intermediate_size", m->kind == HF_MIXTRAL ? m->H : p->H, 1, 0, e);
        if (!rc && m->kind == HF_MIXTRAL) {
            rc = check_key(where, cfg, "num_local_experts", m->E, 1, 0, e);
            if (!rc) rc = check_key(where, cfg, "num_experts_per_tok", m->K, 1, 0, e);
            const cJSON *sw = cJSON_GetObjectItemCaseSensitive(cfg, "sliding_window");
            if (!rc && cJSON_IsNumber(sw) && sw->valuedouble < p->maxT)
                rc = hyp_fail(e, HYP_EINPUT, "%s: sliding_window is %g, this trainer attends over the whole context of %d — use a model without a window this short",
                              where, sw->valuedouble, p->maxT);
        }
        if (!rc) rc = check_key(where, cfg, "head_dim", p->hd, 0, 0, e);
        if (!rc) rc = check_key(where, cfg, "rms_norm_eps", m->eps, 0, 1e-6, e);
        if (!rc) rc = check_key(where, cfg, "rope_theta", m->theta, 0, 1e-9, e);
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
        if (!rc && rs && !cJSON_IsNull(rs))
            rc = hyp_fail(e, HYP_EINPUT, "%s: rope_scaling is set, this trainer computes plain RoPE — use a model without rope scaling", where);
    }
    int tied = hf_tied(cfg);
    /* a tied model initializes an untied plan (lm_head starts as a copy of the embedding); the
     * other way round would drop the trained head */
    if (!rc && !tied && p->tied)
        rc = hyp_fail(e, HYP_EINPUT, "%s: tie_word_embeddings is false, this trainer's plan is tied — generate the trainer from a model YAML with tied_embeddings: false",
                      where);
    return rc;
}

/* Tensors HF files may hold that are not weights (buffers of older transformers). */
static int ignorable(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || ends_with(name, "rotary_emb.inv_freq");
}

static int load_hf(const char *dir, const plan_t *p, const hf_model *m, float *out, hyp_err *e) {
    hf_dir h;
    int rc = hf_dir_open(dir, &h, e);
    if (!rc) rc = check_config(dir, h.cfg, p, m, e);
    /* GPT-2 from the Hub names its tensors without "transformer." (GPT2Model's names) */
    float *tmp = NULL;
    int64_t tmp_n = 0;
    for (int i = 0; !rc && i < p->n_params_t; i++) {
        const plan_param *pp = &p->params[i];
        hf_layout l;
        layout_of(p, m, pp, &l);
        int fi = 0;
        const hyp_st_tensor *t = hf_find(&h, pp->name, &fi);
        if (!t && !strncmp(pp->name, "transformer.", 12)) t = hf_find(&h, pp->name + 12, &fi);
        if (!t && !strcmp(pp->name, "lm_head.weight") && hf_tied(h.cfg)) /* tied HF model, untied plan */
            t = hf_find(&h, m->kind == HF_GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight", &fi);
        if (!t) {
            char b[64];
            shape_str(l.ndim, l.shape, b, sizeof b);
            rc = hyp_fail(e, HYP_EINPUT, "%s: no tensor '%s' (this trainer's plan needs it, shape %s) — the directory holds a different model",
                          dir, pp->name, b);
            break;
        }
        int same = t->ndim == l.ndim;
        for (int d = 0; same && d < l.ndim; d++) same = t->shape[d] == l.shape[d];
        if (!same) {
            char a[64], b[64];
            shape_str(t->ndim, t->shape, a, sizeof a);
            shape_str(l.ndim, l.shape, b, sizeof b);
            rc = hyp_fail(e, HYP_EINPUT, "%s: tensor '%s' has shape %s, this trainer's plan needs %s%s — generate a trainer for this model's shape",
                          hyp_st_path(h.f[fi]), t->name, a, b, l.transpose ? " (HF's Conv1D layout [in, out])" : "");
            break;
        }
        if (t->dtype != HYP_ST_F32 && t->dtype != HYP_ST_BF16 && t->dtype != HYP_ST_F16) {
            rc = hyp_fail(e, HYP_EINPUT, "%s: tensor '%s' is %s — only F32, BF16 and F16 weights load", hyp_st_path(h.f[fi]), t->name,
                          hyp_st_dtype_name(t->dtype));
            break;
        }
        int64_t nel = hyp_st_numel(t->ndim, t->shape);
        if (nel > tmp_n) {
            free(tmp);
            tmp_n = nel;
            if (!(tmp = malloc(sizeof(float) * (size_t)nel))) rc = hyp_fail(e, HYP_EFAIL, "out of memory");
        }
        if (!rc && !(rc = hyp_st_to_f32(h.f[fi], t, tmp, e))) hf_to_ours(pp, &l, tmp, out + pp->offset);
    }
    /* every tensor of the files must be one of ours (a tied lm_head copy may be there too) */
    for (int f = 0; !rc && f < h.nf; f++)
        for (int k = 0; !rc && k < hyp_st_count(h.f[f]); k++) {
            const char *name = hyp_st_get(h.f[f], k)->name;
            int known = ignorable(name) || (p->tied && !strcmp(name, "lm_head.weight"));
            for (int i = 0; !known && i < p->n_params_t; i++)
                known = !strcmp(name, p->params[i].name) ||
                        (!strncmp(p->params[i].name, "transformer.", 12) && !strcmp(name, p->params[i].name + 12));
            if (!known)
                rc = hyp_fail(e, HYP_EINPUT, "%s: holds tensor '%.200s', which this trainer's model does not have — the directory holds a different model",
                              hyp_st_path(h.f[f]), name);
        }
    free(tmp);
    hf_dir_close(&h);
    return rc;
}

int hyp_hf_init_from(const char *path, const plan_t *p, float *params, char *what, size_t what_cap, hyp_err *e) {
    if (!path || !*path) return hyp_fail(e, HYP_EINPUT, "--init-from: no path given");
    if (!hyp_fs_is_dir(path))
        return hyp_fail(e, HYP_EINPUT, "%s: not a directory — give a Hugging Face model directory (config.json + model.safetensors) or a Hyperion checkpoint directory",
                        path);
    float *tmp = calloc((size_t)p->param_floats, sizeof(float));
    if (!tmp) return hyp_fail(e, HYP_EFAIL, "out of memory for the initial weights");
    int rc;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (hyp_hf_is_our_ckpt(path)) {
        hyp_ckpt_state st;
        rc = load_our_ckpt(path, p, tmp, &st, e);
        if (rc == HYP_ENOCKPT) rc = HYP_EINPUT;
        if (!rc && what) snprintf(what, what_cap, "Hyperion checkpoint %s (step %llu)", st.path, (unsigned long long)st.step);
    } else if (hyp_fs_exists(cfg)) {
        hf_model m;
        rc = hf_model_of(p, &m, e);
        if (!rc) rc = load_hf(path, p, &m, tmp, e);
        if (!rc && what) snprintf(what, what_cap, "Hugging Face %s directory %s", HF_CLASS[m.kind], path);
    } else {
        rc = hyp_fail(e, HYP_EINPUT, "%s: neither a Hyperion checkpoint (latest, state.json) nor a Hugging Face model directory (config.json) — point --init-from at one",
                      path);
    }
    if (!rc) memcpy(params, tmp, sizeof(float) * (size_t)p->param_floats);
    free(tmp);
    return rc;
}
