/* dev_expr.c — the manifest expression evaluator (dev_expr.h): a recursive-descent parser over
 * the expression text, values in double (integral results checked where an integer is needed). */
#include "dev_expr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



void dev_env_set(env_t *v, const char *name, double val) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->name[i], name)) return; /* the first binding wins (priority order) */
    if (v->n < ENV_MAX) {
        v->name[v->n] = name;
        v->val[v->n++] = val;
    }
}

typedef struct {
    const char *s;
    const env_t *env;
    int err;
    char what[96];
} ev_t;

static void ev_skip(ev_t *q) {
    while (isspace((unsigned char)*q->s)) q->s++;
}
static double ev_expr(ev_t *q);

static int integral(double a) { return a == floor(a) && fabs(a) < 9e15; }

static double ev_primary(ev_t *q) {
    ev_skip(q);
    if (*q->s == '(') {
        q->s++;
        double v = ev_expr(q);
        ev_skip(q);
        if (*q->s != ')') q->err = 1;
        else q->s++;
        return v;
    }
    if (isdigit((unsigned char)*q->s) || *q->s == '.') {
        char *end;
        double v = strtod(q->s, &end);
        q->s = end;
        return v;
    }
    if (isalpha((unsigned char)*q->s) || *q->s == '_') {
        const char *b = q->s;
        while (isalnum((unsigned char)*q->s) || *q->s == '_') q->s++;
        size_t len = (size_t)(q->s - b);
        ev_skip(q);
        if (*q->s == '(') { /* function */
            q->s++;
            double a[2] = {0, 0};
            int na = 0;
            for (;;) {
                double v = ev_expr(q);
                if (na < 2) a[na] = v;
                na++;
                ev_skip(q);
                if (*q->s == ',') { q->s++; continue; }
                if (*q->s == ')') { q->s++; break; }
                q->err = 1;
                return 0;
            }
            if (len == 4 && !strncmp(b, "cdiv", 4) && na == 2 && a[1] != 0) return ceil(a[0] / a[1]);
            if (len == 3 && !strncmp(b, "min", 3) && na == 2) return a[0] < a[1] ? a[0] : a[1];
            if (len == 3 && !strncmp(b, "max", 3) && na == 2) return a[0] > a[1] ? a[0] : a[1];
            snprintf(q->what, sizeof q->what, "unknown function %.*s", (int)len, b);
            q->err = 1;
            return 0;
        }
        for (int i = 0; i < q->env->n; i++)
            if (strlen(q->env->name[i]) == len && !strncmp(q->env->name[i], b, len)) return q->env->val[i];
        if (len == 4 && !strncmp(b, "true", 4)) return 1;
        if (len == 5 && !strncmp(b, "false", 5)) return 0;
        snprintf(q->what, sizeof q->what, "unknown name %.*s", (int)len, b);
        q->err = 1;
        return 0;
    }
    q->err = 1;
    return 0;
}

static double ev_unary(ev_t *q) {
    ev_skip(q);
    if (*q->s == '-') {
        q->s++;
        return -ev_unary(q);
    }
    double v = ev_primary(q);
    ev_skip(q);
    if (*q->s == '^') {
        q->s++;
        v = pow(v, ev_unary(q));
    }
    return v;
}

static double ev_term(ev_t *q) {
    double v = ev_unary(q);
    for (;;) {
        ev_skip(q);
        char c = *q->s;
        if (c != '*' && c != '/' && c != '%') return v;
        q->s++;
        double r = ev_unary(q);
        if (c == '*') v *= r;
        else if (r == 0) q->err = 1;
        else if (c == '%') v = fmod(v, r);
        else v = integral(v) && integral(r) ? (double)((long long)v / (long long)r) : v / r;
    }
}

static double ev_expr(ev_t *q) {
    double v = ev_term(q);
    for (;;) {
        ev_skip(q);
        if (*q->s == '+') { q->s++; v += ev_term(q); }
        else if (*q->s == '-') { q->s++; v -= ev_term(q); }
        else return v;
    }
}

/* Evaluates a comma-separated list of up to `max` expressions; returns how many, or -1. */
int dev_eval_list(const char *s, const env_t *env, double *out, int max, char *what, size_t wn) {
    ev_t q = {s, env, 0, ""};
    int n = 0;
    for (;;) {
        double v = ev_expr(&q);
        if (q.err) break;
        if (n < max) out[n] = v;
        n++;
        ev_skip(&q);
        if (*q.s == ',') { q.s++; continue; }
        if (*q.s) q.err = 1;
        break;
    }
    if (q.err || n > max) {
        snprintf(what, wn, "cannot evaluate '%s'%s%s", s, q.what[0] ? ": " : "", q.what);
        return -1;
    }
    return n;
}
