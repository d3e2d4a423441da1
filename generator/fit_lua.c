/* fit_lua.c — the numerical core of `gen scaling fit` (v2146/v2147): the Chinchilla paper's
 * approach 3 fit of L(N, D) = E + A / N^alpha + B / D^beta to a set of runs, and its bootstrap.
 *
 * As in Hoffmann et al. (2022, §3.3 and appendix D.2) and Epoch AI's replication (Besiroglu et al.
 * 2024): parameters theta = (a, b, e, alpha, beta) with A = exp(a), B = exp(b), E = exp(e); the
 * prediction log L_hat = LSE(a - alpha log N, b - beta log D, e); the objective is the sum over runs
 * of Huber_delta(log L - log L_hat) with delta = 1e-3; minimized by L-BFGS (libLBFGS, Debian's
 * liblbfgs) from every point of a grid of starts, the lowest objective kept. The bootstrap refits
 * resamples (drawn with a seeded splitmix64, so a fit is reproducible) from the full fit's optimum.
 *
 * Lua sees two functions (hyp.scaling_fit, hyp.scaling_bootstrap); reading runs, approach 2, the
 * report and the plot are Lua (generator/lua/scaling.lua). Nothing here reads files or exits. */
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen_host.h"
#include "lawfit.h" /* runtime/obs: the objective and L-BFGS, shared with the trainer's v2148 */

enum { NP = 5 }; /* a, b, e, alpha, beta */

static hyp_lawfit_data two_terms(const double *logn, const double *logd, const double *logl, const int *idx, int n,
                                 double delta) {
    hyp_lawfit_data d = {2, n, {logn, logd}, logl, idx, NULL, delta, 0};
    return d;
}

/* Reads runs {N...}, {D...}, {L...} (Lua arrays of positive numbers) into logs. */
static int read_runs(lua_State *L, double **logn, double **logd, double **logl) {
    int n = (int)luaL_len(L, 1);
    if (n < 1 || (int)luaL_len(L, 2) != n || (int)luaL_len(L, 3) != n)
        return luaL_error(L, "scaling_fit: N, D and L must be arrays of one length >= 1");
    double *buf = malloc(sizeof(double) * 3 * (size_t)n);
    if (!buf) return luaL_error(L, "out of memory");
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, t + 1, i + 1);
            double v = lua_tonumber(L, -1);
            lua_pop(L, 1);
            if (!(v > 0) || !isfinite(v)) {
                free(buf);
                return luaL_error(L, "scaling_fit: value %d of array %d is not a positive number", i + 1, t + 1);
            }
            buf[(size_t)t * (size_t)n + (size_t)i] = log(v);
        }
    *logn = buf;
    *logd = buf + n;
    *logl = buf + 2 * (size_t)n;
    return n;
}

/* Reads a Lua array of numbers (index idx) into out[cap]; returns the count. */
static int read_axis(lua_State *L, int idx, const char *key, double *out, int cap) {
    lua_getfield(L, idx, key);
    int n = 0;
    if (lua_istable(L, -1)) {
        n = (int)luaL_len(L, -1);
        if (n > cap) n = cap;
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, -1, i + 1);
            out[i] = lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

static void push_params(lua_State *L, const double *x, double fx) {
    static const char *const NAMES[NP] = {"a", "b", "e", "alpha", "beta"};
    lua_createtable(L, 0, 9);
    for (int j = 0; j < NP; j++) {
        lua_pushnumber(L, x[j]);
        lua_setfield(L, -2, NAMES[j]);
    }
    lua_pushnumber(L, exp(x[0]));
    lua_setfield(L, -2, "A");
    lua_pushnumber(L, exp(x[1]));
    lua_setfield(L, -2, "B");
    lua_pushnumber(L, exp(x[2]));
    lua_setfield(L, -2, "E");
    lua_pushnumber(L, fx);
    lua_setfield(L, -2, "objective");
}

/* hyp.scaling_fit(N, D, L, {a={...}, b={...}, e={...}, alpha={...}, beta={...}, delta=1e-3})
 * -> {a, b, e, alpha, beta, A, B, E, objective, starts, usable} — the best of the grid's starts
 * (every combination of the five axes). */
static int l_scaling_fit(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    enum { CAP = 64 };
    double ax[NP][CAP];
    int na[NP];
    static const char *const AXES[NP] = {"a", "b", "e", "alpha", "beta"};
    long starts = 1;
    for (int j = 0; j < NP; j++) {
        na[j] = read_axis(L, 4, AXES[j], ax[j], CAP);
        if (na[j] < 1) return luaL_error(L, "scaling_fit: the grid has no '%s' values", AXES[j]);
        starts *= na[j];
    }
    lua_getfield(L, 4, "delta");
    double delta = luaL_optnumber(L, -1, 1e-3);
    lua_pop(L, 1);
    double *logn, *logd, *logl;
    int n = read_runs(L, &logn, &logd, &logl);
    hyp_lawfit_data d = two_terms(logn, logd, logl, NULL, n, delta);
    const double *axes[NP] = {ax[0], ax[1], ax[2], ax[3], ax[4]};
    double best[NP] = {0}, bestf = INFINITY;
    long ok = hyp_lawfit_grid(&d, axes, na, best, &bestf);
    free(logn);
    if (ok == 0) return luaL_error(L, "scaling_fit: no start of the grid converged");
    push_params(L, best, bestf);
    lua_pushinteger(L, starts);
    lua_setfield(L, -2, "starts");
    lua_pushinteger(L, ok);
    lua_setfield(L, -2, "usable");
    return 1;
}

/* hyp.scaling_bootstrap(N, D, L, start{a,b,e,alpha,beta}, samples, seed[, delta])
 * -> array of samples fits {a, b, e, alpha, beta, objective}: each refits n runs drawn with
 * replacement (index = splitmix64 mod n; the modulo bias is below 2^-40 for n < 2^24) from start. */
static int l_scaling_bootstrap(lua_State *L) {
    luaL_checktype(L, 4, LUA_TTABLE);
    int samples = (int)luaL_checkinteger(L, 5);
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 6);
    double delta = luaL_optnumber(L, 7, 1e-3);
    if (samples < 0 || samples > 100000) return luaL_error(L, "scaling_bootstrap: samples must be in [0, 100000]");
    static const char *const P[NP] = {"a", "b", "e", "alpha", "beta"};
    double x0[NP];
    for (int j = 0; j < NP; j++) {
        lua_getfield(L, 4, P[j]);
        x0[j] = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    double *logn, *logd, *logl;
    int n = read_runs(L, &logn, &logd, &logl);
    int *idx = malloc(sizeof(int) * (size_t)n);
    if (!idx) {
        free(logn);
        return luaL_error(L, "out of memory");
    }
    lua_createtable(L, samples, 0);
    int k = 0;
    for (int s = 0; s < samples; s++) {
        for (int i = 0; i < n; i++) idx[i] = (int)(hyp_lawfit_rand(&seed) % (uint64_t)n);
        hyp_lawfit_data d = two_terms(logn, logd, logl, idx, n, delta);
        double x[NP], fx;
        memcpy(x, x0, sizeof x);
        if (!hyp_lawfit_minimize(&d, x, &fx)) continue; /* counted by the caller: #result < samples */
        push_params(L, x, fx);
        lua_rawseti(L, -2, ++k);
    }
    free(idx);
    free(logn);
    return 1;
}

/* hyp.scaling_objective(N, D, L, {a,b,e,alpha,beta}[, delta]) -> objective, {gradient 5} */
static int l_scaling_objective(lua_State *L) {
    luaL_checktype(L, 4, LUA_TTABLE);
    double delta = luaL_optnumber(L, 5, 1e-3);
    static const char *const P[NP] = {"a", "b", "e", "alpha", "beta"};
    double x[NP], g[NP];
    for (int j = 0; j < NP; j++) {
        lua_getfield(L, 4, P[j]);
        x[j] = luaL_checknumber(L, -1);
        lua_pop(L, 1);
    }
    double *logn, *logd, *logl;
    int n = read_runs(L, &logn, &logd, &logl);
    hyp_lawfit_data d = two_terms(logn, logd, logl, NULL, n, delta);
    double f = hyp_lawfit_objective(&d, x, g);
    free(logn);
    lua_pushnumber(L, f);
    lua_createtable(L, NP, 0);
    for (int j = 0; j < NP; j++) {
        lua_pushnumber(L, g[j]);
        lua_rawseti(L, -2, j + 1);
    }
    return 2;
}

void gen_register_fit(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    lua_pushcfunction(L, l_scaling_fit);
    lua_setfield(L, idx, "scaling_fit");
    lua_pushcfunction(L, l_scaling_bootstrap);
    lua_setfield(L, idx, "scaling_bootstrap");
    lua_pushcfunction(L, l_scaling_objective);
    lua_setfield(L, idx, "scaling_objective");
}
