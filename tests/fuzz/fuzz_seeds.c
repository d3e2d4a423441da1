/* fuzz_seeds.c — writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/) with the
 * project's own writers, so every seed is a real, valid input of a few KB: safetensors files
 * (hyp_st_write), checkpoints full, weights-only, sharded and incremental (hyp_ckpt_*), a Hugging
 * Face directory (hyp_hf_export), tokenizers (hyp_tok_train, and its ranks as tiktoken), data
 * directories (hyp_data_prepare, hyp_chat_prepare), gen data inputs and post-training JSONL with
 * their prepared .pref files. Multi-file inputs are packed as the targets unpack them (FZ_SEP).
 * Usage: fuzz_seeds OUTDIR (run by make_corpus.sh; plan seeds come from gen there).
 * Never: a seed made by hand-editing bytes — the crash regressions beside them are the only such. */
#include "fuzz_util.h"

#include <errno.h>
#include <zlib.h>

#include "chat.h"
#include "ckpt.h"
#include "ckpt_delta.h"
#include "data.h"
#include "fuzz_ckpt_model.h"
#include "hf.h"
#include "plan.h"
#include "safetensors.h"
#include "tokenizer.h"

static const char *g_out;
static char g_tmp[512];

static void die(const char *what, const hyp_err *e) {
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, e ? e->msg : strerror(errno));
    exit(1);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *n = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) die(path, NULL);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

/* OUT/target/name := [prefix byte] + the files (paths, NULL = empty part) joined by FZ_SEP. */
static void pack(const char *target, const char *name, int prefix, const char *const *files, int n) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_out, target);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", g_out, target, name);
    FILE *f = fopen(p, "wb");
    if (!f) die(p, NULL);
    if (prefix >= 0) fputc(prefix, f);
    for (int i = 0; i < n; i++) {
        if (i) fwrite(FZ_SEP, 1, FZ_SEP_LEN, f);
        size_t len = 0;
        uint8_t *b = files[i] ? slurp(files[i], &len) : NULL;
        if (files[i] && !b) die(files[i], NULL);
        if (len) fwrite(b, 1, len, f);
        free(b);
    }
    fclose(f);
}

static void put(const char *rel, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_tmp, rel);
    FILE *f = fopen(p, "wb");
    if (!f || fputs(text, f) < 0) die(p, NULL);
    fclose(f);
}

static const char *tp(const char *rel) { /* a path under g_tmp (8 rotating buffers) */
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, rel);
    return buf[k];
}

static void seeds_safetensors(void) {
    hyp_err e;
    float a[12];
    uint16_t h[5] = {0x3c00, 0x4000, 0xbc00, 0x0000, 0x7bff};
    int64_t ix[3] = {-1, 0, 1 << 20};
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.5f - 2;
    hyp_st_tensor t[3] = {{.name = "weight", .dtype = HYP_ST_F32, .ndim = 2, .shape = {3, 4}, .data = a},
                          {.name = "half", .dtype = HYP_ST_BF16, .ndim = 1, .shape = {5}, .data = h},
                          {.name = "index", .dtype = HYP_ST_I64, .ndim = 1, .shape = {3}, .data = ix}};
    hyp_st_meta m[2] = {{"format", "pt"}, {"note", "seed"}};
    if (hyp_st_write(tp("a.safetensors"), t, 3, m, 2, NULL, &e)) die("st", &e);
    hyp_st_tensor s[2] = {{.name = "scalar", .dtype = HYP_ST_F16, .ndim = 0, .data = h},
                          {.name = "empty", .dtype = HYP_ST_F32, .ndim = 2, .shape = {0, 3}, .data = NULL}};
    if (hyp_st_write(tp("b.safetensors"), s, 2, NULL, 0, NULL, &e)) die("st", &e);
    const char *fa[] = {tp("a.safetensors")}, *fb[] = {tp("b.safetensors")};
    pack("safetensors", "seed_three_dtypes", -1, fa, 1);
    pack("safetensors", "seed_scalar_empty", -1, fb, 1);
}

static hyp_ckpt_state ck_state(uint64_t step) {
    hyp_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = step, st.tokens_seen = 64 * step, st.rng[0] = 1, st.rng[1] = 2, st.rng[2] = 3, st.rng[3] = 4;
    st.loader_epoch = 0, st.loader_position = step, st.world = 1;
    snprintf(st.config_hash, sizeof st.config_hash, "%s", FZ_CK_HASH);
    snprintf(st.plan, sizeof st.plan, "fuzz seed");
    st.has_loss_scale = 1, st.loss_scale = 1024, st.loss_scale_good = 3;
    snprintf(st.tokenizer, sizeof st.tokenizer, "byte");
    return st;
}

static void seeds_ckpt(void) {
    hyp_err e;
    fz_ck_model m;
    fz_ck_model_init(&m);
    hyp_ckpt_state st = ck_state(7);
    if (hyp_ckpt_save_aux(tp("ck"), m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, m.aux, FZ_CK_AUX, &st, 0, &e)) die("ckpt", &e);
    const char *full[] = {tp("ck/step_00000007/state.json"), tp("ck/step_00000007/model.safetensors"),
                          tp("ck/step_00000007/optimizer.safetensors"), tp("ck/step_00000007/train_state.safetensors"),
                          NULL, NULL, tp("ck/latest")};
    pack("ckpt", "seed_full_aux", -1, full, 7);
    if (hyp_ckpt_save(tp("ckw"), m.params, NULL, 0, FZ_CK_N, &st, 0, &e)) die("ckpt weights", &e);
    const char *wo[] = {tp("ckw/step_00000007/state.json"), tp("ckw/step_00000007/model.safetensors")};
    pack("ckpt", "seed_weights_only", -1, wo, 2);
    /* v2181 sharded: two ranks, each half of every tensor's elements */
    char tmp[1024];
    if (hyp_ckpt_shard_begin(tp("cks"), &st, tmp, sizeof tmp, &e)) die("shard begin", &e);
    int64_t ranges[2 * FZ_CK_N * 2];
    hyp_ckpt_shard_sum sums[2];
    for (int r = 0; r < 2; r++) {
        hyp_ckpt_slice sl[FZ_CK_N];
        for (int i = 0; i < FZ_CK_N; i++) {
            int64_t n = i == 0 ? 6 : 3, lo = r ? n / 2 : 0, hi = r ? n : n / 2;
            sl[i].lo = lo, sl[i].hi = hi, sl[i].p = m.params[i].data + lo;
            for (int k = 0; k < FZ_CK_STATES; k++) sl[i].state[k] = m.states[k][i].data + lo;
            ranges[(r * FZ_CK_N + i) * 2] = lo, ranges[(r * FZ_CK_N + i) * 2 + 1] = hi;
        }
        if (hyp_ckpt_shard_write(tmp, r, m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, sl, &st, &sums[r], &e)) die("shard write", &e);
    }
    if (hyp_ckpt_shard_commit(tp("cks"), tmp, m.params, FZ_CK_N, 2, 1, ranges, sums, m.aux, FZ_CK_AUX, &st, 0, &e))
        die("shard commit", &e);
    const char *sh[] = {tp("cks/step_00000007/state.json"), NULL, NULL, tp("cks/step_00000007/train_state.safetensors"),
                        tp("cks/step_00000007/shard_00000.safetensors"), tp("cks/step_00000007/shard_00001.safetensors"),
                        tp("cks/latest")};
    pack("ckpt", "seed_sharded", -1, sh, 7);

    /* v2180: step 1 full, step 2 a delta against it */
    hyp_ckpt_state s1 = ck_state(1), s2 = ck_state(2);
    if (hyp_ckpt_save_inc(tp("ckd"), m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, NULL, 0, &s1, 0, NULL, NULL, &e)) die("inc 1", &e);
    m.w[1] += 1e-3f, m.sw[0][2] *= 1.5f;
    if (hyp_ckpt_save_inc(tp("ckd"), m.params, m.state_ptr, FZ_CK_STATES, FZ_CK_N, NULL, 0, &s2, 0, "step_00000001", NULL, &e))
        die("inc 2", &e);
    const char *dl[] = {tp("ckd/step_00000002/state.json"), tp("ckd/step_00000002/model.safetensors.zdelta"),
                        tp("ckd/step_00000002/optimizer.safetensors.zdelta"), tp("ckd/step_00000001/model.safetensors"),
                        tp("ckd/step_00000001/optimizer.safetensors"), tp("ckd/step_00000001/state.json")};
    pack("ckpt_delta", "seed_delta", -1, dl, 6);
}

static void seeds_hf(void) {
    hyp_err e;
    plan_t p;
    if (plan_load(HYP_SOURCE_DIR "/tests/fuzz/fuzz-tiny.plan.json", &p, &e)) die("plan", &e);
    float *w = calloc((size_t)p.param_floats, sizeof *w);
    hyp_ckpt_tensor *t = calloc((size_t)p.n_params_t, sizeof *t);
    for (int64_t i = 0; i < p.param_floats; i++) w[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int i = 0; i < p.n_params_t; i++) {
        t[i].name = p.params[i].name, t[i].data = w + p.params[i].offset, t[i].ndim = p.params[i].ndim;
        memcpy(t[i].shape, p.params[i].shape, sizeof t[i].shape);
    }
    hyp_ckpt_state st = ck_state(3);
    snprintf(st.config_hash, sizeof st.config_hash, "%s", p.state_hash);
    if (hyp_ckpt_save(tp("hfck"), t, NULL, 0, p.n_params_t, &st, 0, &e)) die("hf ckpt", &e);
    if (hyp_hf_export(tp("hfck"), &p, tp("hf"), &e)) die("hf export", &e);
    const char *one[] = {tp("hf/config.json"), tp("hf/model.safetensors")};
    pack("hf", "seed_gpt2_export", -1, one, 2);
    /* the sharded form transformers writes for big models: an index naming two files */
    size_t n = 0;
    uint8_t *b = slurp(tp("hf/model.safetensors"), &n);
    hyp_st_file *f;
    if (hyp_st_open(tp("hf/model.safetensors"), &f, &e)) die("hf reopen", &e);
    int nt = hyp_st_count(f);
    char idx[8192];
    int k = snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": %zu}, \"weight_map\": {", n);
    hyp_st_tensor *half[2];
    int nh[2] = {0, 0};
    half[0] = calloc((size_t)nt, sizeof **half), half[1] = calloc((size_t)nt, sizeof **half);
    for (int i = 0; i < nt; i++) {
        const hyp_st_tensor *x = hyp_st_get(f, i);
        int s = i >= nt / 2;
        half[s][nh[s]++] = *x;
        k += snprintf(idx + k, sizeof idx - (size_t)k, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", x->name, s + 1);
    }
    snprintf(idx + k, sizeof idx - (size_t)k, "}}\n");
    put("hf/model.safetensors.index.json", idx);
    if (hyp_st_write(tp("hf/model-00001-of-00002.safetensors"), half[0], nh[0], NULL, 0, NULL, &e) ||
        hyp_st_write(tp("hf/model-00002-of-00002.safetensors"), half[1], nh[1], NULL, 0, NULL, &e))
        die("hf shards", &e);
    const char *two[] = {tp("hf/config.json"), NULL, tp("hf/model.safetensors.index.json"),
                         tp("hf/model-00001-of-00002.safetensors"), tp("hf/model-00002-of-00002.safetensors")};
    pack("hf", "seed_gpt2_sharded", -1, two, 5);
    hyp_st_close(f);
    free(b), free(half[0]), free(half[1]), free(w), free(t);
    plan_free(&p);
}

static const char TEXT[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was "
    "upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be "
    "light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness.\n";

static void seeds_tokenizer(void) {
    hyp_err e;
    put("text.txt", TEXT);
    const char *files[] = {tp("text.txt")};
    int merges = 0;
    if (hyp_tok_train(files, 1, 300, tp("tok"), &merges, &e)) die("tok train", &e);
    const char *tj[] = {tp("tok/tokenizer.json")};
    pack("tokenizer", "seed_trained_bpe_json", 0, tj, 1);
    /* its ranks in tiktoken's format: base64(token bytes) rank, one a line */
    hyp_tok *t = hyp_tok_open(tp("tok/tokenizer.json"), &e);
    if (!t) die("tok open", &e);
    FILE *f = fopen(tp("ranks.tiktoken"), "wb");
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int id = 0; id < hyp_tok_vocab_size(t); id++) {
        size_t n = 0;
        const uint8_t *b = hyp_tok_token_bytes(t, id, &n);
        if (!b || id == hyp_tok_eot(t)) continue;
        for (size_t i = 0; i < n; i += 3) {
            uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
            fputc(B64[v >> 18 & 63], f), fputc(B64[v >> 12 & 63], f);
            fputc(i + 1 < n ? B64[v >> 6 & 63] : '=', f), fputc(i + 2 < n ? B64[v & 63] : '=', f);
        }
        fprintf(f, " %d\n", id);
    }
    fclose(f);
    hyp_tok_free(t);
    const char *tk[] = {tp("ranks.tiktoken")};
    pack("tokenizer", "seed_ranks_tiktoken", 1, tk, 1);
}

static void seeds_data_docs_chat(void) {
    hyp_err e;
    put("docs.jsonl", "{\"text\": \"In the beginning God created the heaven and the earth.\"}\n"
                      "{\"text\": \"And the earth was without form, and void.\", \"id\": 2}\n\n"
                      "{\"text\": \"And God said, Let there be light: and there was light.\\n\\u00e9\"}\n");
    put("fortunes.txt", "A fool and his money are soon parted.\n%\nLook before you leap.\n%\n\n%\nMany hands make light work.\n");
    put("one.txt", TEXT);
    const char *dj[] = {tp("docs.jsonl")}, *dt[] = {tp("fortunes.txt")}, *d1[] = {tp("one.txt")};
    pack("docs", "seed_jsonl", 0, dj, 1);
    pack("docs", "seed_fortunes", 1, dt, 1);
    pack("docs", "seed_text", 2, d1, 1);
    pack("docs", "seed_stream_jsonl", 4, dj, 1);
    pack("docs", "seed_stream_fortunes", 5, dt, 1);
    gzFile g = gzopen(tp("docs.jsonl.gz"), "wb9");
    size_t n = 0;
    uint8_t *b = slurp(tp("docs.jsonl"), &n);
    gzwrite(g, b, (unsigned)n);
    gzclose(g);
    free(b);
    const char *dg[] = {tp("docs.jsonl.gz")};
    pack("docs", "seed_jsonl_gz", 3, dg, 1);

    /* a shard directory: several documents, small shards, a val split */
    hyp_data_opts o;
    hyp_data_opts_default(&o);
    o.val_fraction = 0.2, o.shard_tokens = 64;
    const char *in[] = {tp("docs.jsonl")};
    if (hyp_data_prepare(in, 1, tp("data"), &o, &e)) die("data", &e);
    const char *dd[] = {tp("data/meta.json"), tp("data/train_000000.bin"), tp("data/train_000000.docs"), NULL,
                        tp("data/train_000001.bin"), tp("data/train_000001.docs"), tp("data/val_000000.bin"),
                        tp("data/val_000000.docs")};
    pack("data", "seed_shards_docs", -1, dd, 8);

    /* chat data (v2193): shards with .docs and .mask sidecars */
    put("chat.jsonl",
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi?\"}, "
        "{\"role\": \"assistant\", \"content\": \"Hello.\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}, "
        "{\"role\": \"user\", \"content\": \"and 3+3?\"}, {\"role\": \"assistant\", \"content\": \"6\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Name a color.\"}, {\"role\": \"assistant\", \"content\": \"Blue.\"}]}\n");
    if (hyp_chat_prepare(tp("chat.jsonl"), "chatml", "byte", tp("chatdata"), 0.34, 0, &e)) die("chat", &e);
    const char *cd[] = {tp("chatdata/meta.json"), tp("chatdata/train_000000.bin"), tp("chatdata/train_000000.docs"),
                        tp("chatdata/train_000000.mask"), NULL, NULL, tp("chatdata/val_000000.bin"),
                        tp("chatdata/val_000000.docs")};
    pack("data", "seed_chat_mask", -1, cd, 8);

    /* chat / preference JSONL and a template file: flags byte as fuzz_chat.c reads it */
    put("tpl.json", "{\"bos\": \"<|endoftext|>\", \"system\": {\"prefix\": \"S: \", \"suffix\": \"\\n\"}, "
                    "\"user\": {\"prefix\": \"U: \", \"suffix\": \"\\n\"}, \"assistant\": {\"prefix\": \"A: \", \"suffix\": \"<|end|>\\n\"}}\n");
    put("pairs.jsonl", "{\"prompt\": \"Sky color?\", \"chosen\": \" Blue.\", \"rejected\": \" Green.\"}\n"
                       "{\"prompt\": \"2+2=\", \"chosen\": \"4\", \"rejected\": \"5\"}\n"
                       "{\"prompt\": \"Capital of France?\", \"chosen\": \" Paris\", \"rejected\": \" Rome\"}\n");
    put("kto.jsonl", "{\"prompt\": \"Sky color?\", \"completion\": \" Blue.\", \"label\": true}\n"
                     "{\"prompt\": \"2+2=\", \"completion\": \"5\", \"label\": false}\n");
    const char *c1[] = {tp("chat.jsonl")}, *c2[] = {tp("chat.jsonl"), tp("tpl.json")};
    pack("chat", "seed_chat_chatml", 0, c1, 1);
    pack("chat", "seed_chat_template", 2, c2, 2);
    if (hyp_pref_prepare(tp("pairs.jsonl"), NULL, "byte", tp("pref"), 0.34, 0, &e)) die("pref", &e);
    if (hyp_pref_prepare(tp("kto.jsonl"), "chatml", "byte", tp("kto"), 0.5, 0, &e)) die("kto", &e);
    const char *p1[] = {tp("pairs.jsonl"), NULL, tp("pref/train.pref")};
    const char *p2[] = {tp("kto.jsonl"), NULL, tp("kto/train.pref")};
    pack("chat", "seed_pref_pairs", 1, p1, 3);
    pack("chat", "seed_pref_kto_chatml", 9, p2, 3);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
        return 2;
    }
    g_out = argv[1];
    mkdir(g_out, 0755);
    snprintf(g_tmp, sizeof g_tmp, "%s", fz_dir());
    seeds_safetensors();
    seeds_ckpt();
    seeds_hf();
    seeds_tokenizer();
    seeds_data_docs_chat();
    return 0;
}
