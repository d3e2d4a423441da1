/* fuzz_data.c — libFuzzer target for the data directory readers (runtime/data/data.c: shard
 * headers, meta.json, the .docs sidecars, the .mask loss masks of chat data, chat.c's mask
 * reader; data_tok.c's tokenizer fields): one input cut at FZ_SEP into meta.json,
 * train_000000.bin, train_000000.docs, train_000000.mask, train_000001.bin, train_000001.docs,
 * val_000000.bin, val_000000.docs. The directory is verified (hyp_data_verify) and opened as a trainer would
 * (windows with positions, packed rows, dynamic batches), and a few batches are read; every token
 * handed out must lie inside the vocabulary. Any input works or is refused with
 * "where: what — how to fix". Seeds: directories gen data's writers made (hyp_data_prepare,
 * hyp_chat_prepare). */
#include "fuzz_util.h"

#include "data.h"
#include "tokenizer.h"

static const char *const NAMES[] = {"meta.json",        "train_000000.bin",  "train_000000.docs", "train_000000.mask",
                                    "train_000001.bin", "train_000001.docs", "val_000000.bin",    "val_000000.docs"};
#define NN ((int)(sizeof NAMES / sizeof *NAMES))
enum { B = 2, T = 8 };

static void batches(const char *dir, const char *split, int layout) {
    hyp_loader *L = NULL;
    hyp_err e = {{0}};
    int rc = hyp_loader_open_rc(dir, split, B, T, 1234, 0, 1, &L, &e);
    fz_check(rc, &e, 0);
    if (rc) return;
    if (layout == 1) rc = hyp_loader_pack_rows(L, 4, &e);
    if (layout == 2) rc = hyp_loader_dynamic(L, B * T, 2, &e);
    fz_check(rc, &e, 0);
    int vocab = hyp_loader_vocab_size(L);
    /* dynamic batches may hold more rows than B (token_budget / shortest bucket) */
    static int32_t in[B * T * 8], tg[B * T * 8], pos[B * T * 8];
    for (int s = 0; !rc && s < 5; s++) {
        e.msg[0] = 0;
        rc = hyp_loader_next_pos(L, in, tg, pos, &e);
        fz_check(rc, &e, 0);
        if (rc) break;
        hyp_batch_info bi;
        hyp_loader_last_batch(L, &bi);
        for (int i = 0; i < bi.B * bi.T; i++)
            if (in[i] < 0 || (vocab > 0 && in[i] >= vocab) || tg[i] < -1 || (vocab > 0 && tg[i] >= vocab) || pos[i] < 0) {
                fprintf(stderr, "fuzz: batch slot %d holds input %d target %d position %d (vocab %d)\n", i, in[i], tg[i], pos[i], vocab);
                abort();
            }
    }
    hyp_loader_state st;
    hyp_loader_get_state(L, &st);
    st.position += 1;
    e.msg[0] = 0;
    fz_check(hyp_loader_set_state(L, &st, &e), &e, 0);
    hyp_loader_close(L);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const DIRS[] = {"d", NULL};
    size_t len[FZ_MAX_PARTS];
    fz_unpack(data, size, DIRS, NAMES, NN, len);
    char dir[600];
    fz_path(dir, sizeof dir, "d");
    hyp_err e = {{0}};
    fz_check(hyp_data_verify(dir, &e), &e, 0);
    hyp_data_tok t;
    e.msg[0] = 0;
    fz_check(hyp_data_tok_read(dir, &t, &e), &e, 0);
    for (int layout = 0; layout < 3; layout++) batches(dir, "train", layout);
    batches(dir, "val", 0);
    return 0;
}
