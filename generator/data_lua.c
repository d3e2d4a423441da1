/* data_lua.c — the Lua -> C boundary of `gen data`'s stages (data_lua.h). Never: validates user
 * input (the technique modules did, with one-line messages) beyond type checks. */
#include "data_lua.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double num(lua_State *L, int t, const char *k, double dflt) {
    lua_getfield(L, t, k);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}
static int boolean(lua_State *L, int t, const char *k, int dflt) {
    lua_getfield(L, t, k);
    int v = lua_isboolean(L, -1) ? lua_toboolean(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}
/* The string field k (kept alive by the table), or NULL. */
static const char *str(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);
    return v;
}
/* Pushes subtable k; returns its absolute index, or 0 (nothing pushed) when absent. */
static int sub(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    if (lua_istable(L, -1)) return lua_absindex(L, -1);
    lua_pop(L, 1);
    return 0;
}

int gen_data_pipe(lua_State *L, int idx, hyp_data_opts *o, hyp_stages *s, double **weights,
                  const char ***names, int n_inputs, char *err, size_t cap) {
    idx = lua_absindex(L, idx);
    hyp_stages_default(s);
    *weights = NULL;
    *names = NULL;
    o->doc_sep = str(L, idx, "doc_sep");
    o->stages = s;
    int t;
    if ((t = sub(L, idx, "names"))) {
        *names = calloc((size_t)n_inputs + 1, sizeof **names);
        if (!*names) {
            snprintf(err, cap, "out of memory");
            lua_pop(L, 1);
            return -1;
        }
        for (int i = 0; i < n_inputs; i++) {
            lua_rawgeti(L, t, i + 1);
            (*names)[i] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            lua_pop(L, 1);
        }
        o->input_names = *names;
        lua_pop(L, 1);
    }
    if ((t = sub(L, idx, "filter"))) {
        hyp_filter_opts *f = &s->filter;
        s->filter_on = 1;
        s->filter_spec = str(L, t, "spec");
        f->min_words = (int)num(L, t, "min_words", f->min_words);
        f->max_words = (int)num(L, t, "max_words", f->max_words);
        f->max_symbol_ratio = num(L, t, "max_symbol_ratio", f->max_symbol_ratio);
        f->max_digit_ratio = num(L, t, "max_digit_ratio", f->max_digit_ratio);
        f->max_ellipsis_lines = num(L, t, "max_ellipsis_lines", f->max_ellipsis_lines);
        f->max_dup_lines = num(L, t, "max_dup_lines", f->max_dup_lines);
        f->max_top_ngram = num(L, t, "max_top_2gram", f->max_top_ngram);
        f->max_dup_ngram = num(L, t, "max_dup_5gram", f->max_dup_ngram);
        f->min_stop_words = (int)num(L, t, "min_stop_words", f->min_stop_words);
        f->min_mean_word = num(L, t, "min_mean_word", f->min_mean_word);
        f->max_mean_word = num(L, t, "max_mean_word", f->max_mean_word);
        lua_pop(L, 1);
    }
    if ((t = sub(L, idx, "dedup"))) {
        hyp_dedup_opts *d = &s->dedup;
        s->dedup_on = 1;
        s->dedup_spec = str(L, t, "spec");
        d->exact = boolean(L, t, "exact", d->exact);
        d->near = boolean(L, t, "near", d->near);
        d->num_perm = (int)num(L, t, "num_perm", d->num_perm);
        d->bands = (int)num(L, t, "bands", d->bands);
        d->ngram = (int)num(L, t, "ngram", d->ngram);
        d->threshold = num(L, t, "threshold", d->threshold);
        d->seed = (uint64_t)num(L, t, "seed", (double)d->seed);
        lua_pop(L, 1);
    }
    if ((t = sub(L, idx, "mix"))) {
        hyp_mix_opts *m = &s->mix;
        s->mix_on = 1;
        s->mix_spec = str(L, t, "spec");
        m->temperature = num(L, t, "temperature", m->temperature);
        lua_getfield(L, t, "last_share");
        if (lua_isnumber(L, -1)) m->fixed_last = 1, m->last_share = lua_tonumber(L, -1);
        lua_pop(L, 1);
        const char *unit = str(L, t, "unit");
        m->by_bytes = unit && !strcmp(unit, "bytes");
        m->size = (uint64_t)num(L, t, "size", 0);
        m->seed = (uint64_t)num(L, t, "seed", (double)m->seed);
        int w = sub(L, t, "weights");
        if (w) {
            int n = (int)luaL_len(L, w);
            if (n > 0) {
                *weights = malloc((size_t)n * sizeof **weights);
                if (!*weights) {
                    snprintf(err, cap, "out of memory");
                    lua_pop(L, 2);
                    return -1;
                }
                for (int i = 0; i < n; i++) {
                    lua_rawgeti(L, w, i + 1);
                    (*weights)[i] = lua_tonumber(L, -1);
                    lua_pop(L, 1);
                }
                m->n_weights = n;
                m->weights = *weights;
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if ((t = sub(L, idx, "curriculum"))) {
        hyp_curriculum_opts *c = &s->curriculum;
        s->curriculum_on = 1;
        s->curriculum_spec = str(L, t, "spec");
        const char *metric = str(L, t, "metric"), *pacing = str(L, t, "pacing");
        if (metric && !strcmp(metric, "length")) c->metric = HYP_METRIC_LENGTH;
        else if (!metric || !strcmp(metric, "compression")) c->metric = HYP_METRIC_COMPRESSION;
        else {
            snprintf(err, cap, "curriculum: unknown metric '%s'", metric);
            lua_pop(L, 1);
            return -1;
        }
        if (!pacing || !strcmp(pacing, "linear")) c->pacing = HYP_PACE_LINEAR;
        else if (!strcmp(pacing, "root")) c->pacing = HYP_PACE_ROOT;
        else if (!strcmp(pacing, "step")) c->pacing = HYP_PACE_STEP;
        else {
            snprintf(err, cap, "curriculum: unknown pacing '%s'", pacing);
            lua_pop(L, 1);
            return -1;
        }
        c->start = num(L, t, "start", c->start);
        c->warmup = num(L, t, "warmup", c->warmup);
        c->steps = (int)num(L, t, "steps", c->steps);
        c->seed = (uint64_t)num(L, t, "seed", (double)c->seed);
        lua_pop(L, 1);
    }
    return 0;
}
