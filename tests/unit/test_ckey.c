/* test_ckey.c — the compile caches' one key rule (runtime/core/ckey.h): a key changes with every
 * field and with the content of every header a source reaches, and not with where the include
 * dirs are. Writes only under build/tests/ckey. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckey.h"
#include "fsio.h"
#include "hyp_test.h"

static char g_dir[1024];

static void put(const char *rel, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    hyp_err e;
    if (hyp_fs_write_atomic(p, text, strlen(text), &e)) printf("setup: %s\n", e.msg);
}

/* The key of `src` (with its includes resolved in dir a, then b) after tag and one option. */
static void key_of(const char *dir_a, const char *dir_b, const char *opt, const char *src, char out[33]) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s", g_dir, dir_a);
    snprintf(b, sizeof b, "%s/%s", g_dir, dir_b);
    const char *dirs[] = {a, b};
    hyp_ckey_headers *h = hyp_ckey_headers_new(dirs, 2);
    hyp_ckey *k = hyp_ckey_begin(h, "test cache 1");
    hyp_ckey_str(k, opt);
    hyp_ckey_source(k, src, strlen(src), NULL);
    hyp_ckey_finish(k, out);
    hyp_ckey_headers_free(h);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/ckey", HYP_BINARY_DIR);
    rm_rf(g_dir);
    hyp_err e;
    char sub[1200];
    const char *dirs[] = {"inc", "inc2", "copy"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", g_dir, dirs[i]);
        if (hyp_fs_mkdirs(sub, &e)) printf("setup: %s\n", e.msg);
    }
    put("inc/a.h", "#include \"b.h\"\nint a;\n");
    put("inc/b.h", "  #  include <c.h>\nint b;\n");
    put("inc2/c.h", "int c;\n");
    put("copy/a.h", "#include \"b.h\"\nint a;\n");
    put("copy/b.h", "  #  include <c.h>\nint b;\n");
    const char *src = "#include <a.h>\n#include <cuda_fp16.h>\n__global__ void k() {}\n";

    char k0[33], k1[33];
    key_of("inc", "inc2", "-O3", src, k0);
    key_of("inc", "inc2", "-O3", src, k1);
    CHECK(strlen(k0) == 32 && !strcmp(k0, k1), "the same inputs give the same key (%s)", k0);

    key_of("inc", "inc2", "-O2", src, k1);
    CHECK(strcmp(k0, k1) != 0, "an option changes the key");

    key_of("inc", "inc2", "-O3", "#include <a.h>\n", k1);
    CHECK(strcmp(k0, k1) != 0, "the source text changes the key");

    key_of("copy", "inc2", "-O3", src, k1);
    CHECK(!strcmp(k0, k1), "the same headers in another directory give the same key");

    put("inc2/c.h", "int c2;\n"); /* reached through a.h -> b.h -> <c.h> */
    key_of("inc", "inc2", "-O3", src, k1);
    CHECK(strcmp(k0, k1) != 0, "a header two includes deep changes the key");

    rm_rf(g_dir);
    return hyp_test_finish();
}
