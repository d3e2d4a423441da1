/* fuzz_chat.c — libFuzzer target for the post-training data readers (runtime/data/chat.c): chat
 * and preference JSONL (`gen data --chat` / `--pref`), chat template files, and the prepared
 * .pref example files the preference trainer reads back (hyp_pref_load). One input cut at FZ_SEP
 * into: a flags byte + the JSONL, a template (empty: a built-in one), a .pref file (empty: the
 * one just prepared). Flags bit 0: preference data (else chat); bit 1: the template part is used
 * (else chatml; bit 2 with it clear: plain); for preference data bit 3: through that template
 * (else the strings as they are). Any input is prepared and read back, or refused with
 * "where: what — how to fix". Seeds: JSONL and .pref files made by hyp_*_prepare. */
#include "fuzz_util.h"

#include "chat.h"
#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[FZ_MAX_PARTS];
    size_t len[FZ_MAX_PARTS];
    int np = fz_split(data, size, part, len, 3);
    if (len[0] < 1) return 0;
    int flags = part[0][0];
    fz_clean();
    fz_write("in.jsonl", part[0] + 1, len[0] - 1);
    char in[600], tpl[600], out[600], pdir[600];
    fz_path(in, sizeof in, "in.jsonl");
    fz_path(out, sizeof out, "out");
    const char *spec = flags & 4 ? "plain" : "chatml";
    if (flags & 2) {
        fz_write("tpl.json", np > 1 ? part[1] : (const uint8_t *)"", np > 1 ? len[1] : 0);
        fz_path(tpl, sizeof tpl, "tpl.json");
        spec = tpl;
    }
    hyp_err e = {{0}};
    int rc = flags & 1 ? hyp_pref_prepare(in, flags & 8 ? spec : NULL, "byte", out, 0.25, 1, &e)
                       : hyp_chat_prepare(in, spec, "byte", out, 0.25, 1, &e);
    fz_check(rc, &e, 0);
    if (!rc && !(flags & 1)) {
        e.msg[0] = 0;
        fz_check(hyp_data_verify(out, &e), &e, 0);
    }
    const char *rd = out;
    if (np > 2 && len[2]) {
        fz_mkdir("p");
        fz_write("p/train.pref", part[2], len[2]);
        fz_path(pdir, sizeof pdir, "p");
        rd = pdir;
    }
    for (int s = 0; s < 2; s++) {
        hyp_pref_set ps;
        e.msg[0] = 0;
        rc = hyp_pref_load(rd, s ? "val" : "train", &ps, &e);
        fz_check(rc, &e, 0);
        if (rc) continue;
        if (ps.n < 0) {
            fprintf(stderr, "fuzz: hyp_pref_load accepted %d examples\n", ps.n);
            abort();
        }
        for (int i = 0; i < ps.n; i++) {
            int64_t need = (int64_t)ps.len[i][0] + ps.len[i][1] + (ps.kind == HYP_PREF_PAIRS ? ps.len[i][2] : 0);
            for (int64_t k = ps.off[i]; k < ps.off[i] + need; k++)
                if (ps.tok[k] < 0 || ps.tok[k] >= ps.vocab) abort();
        }
        hyp_pref_free(&ps);
    }
    return 0;
}
