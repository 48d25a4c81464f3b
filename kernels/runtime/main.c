/* fk_exec: the custom route's runner (docs/ARCHITECTURE.md, route runner contract).
 *
 *   fk_exec --request REQ.json          request from the agent, JSON lines on stdout
 *   fk_exec --plan P --inputs I [--outputs O] [--threads N] [--unfused] [--isa NAME]
 *           [--isa-cap LEVEL] [--warmup N] [--runs N] [--min-time S] [--max-time S]
 *           [--profile-runs K]
 *   fk_exec --check PLAN                load and validate a plan, print its facts
 *   fk_exec --features                  print CPU features and kernel tables
 * Request options: {"fused": bool (default true), "isa": "auto"|"generic"|"avx2"|... (a table
 * by name), "isa_cap": "avx2"|"avx512"|...|"native" (an ISA level: the best table within it)}.
 * Without isa_cap / --isa-cap the cap is $FARM_ISA (kernels/README.md, ISA levels).
 * Every failure is one {"ev": "error", "message": ...} line and exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "json.h"

typedef struct {
    const char *plan, *inputs, *outputs, *isa, *isa_cap;
    int threads, fused, profile_runs, check, features;
    double warmup_runs, warmup_min_s, min_runs, min_time_s, max_time_s;
} config;

static void emit_error(const char *msg) {
    char q[2048];
    fk_json_quote(msg, q, sizeof q);
    printf("{\"ev\": \"error\", \"message\": %s}\n", q);
    fflush(stdout);
    fprintf(stderr, "fk_exec: %s\n", q); /* quoted: damaged names are sanitised there */
}

static int die(const char *msg) {
    emit_error(msg);
    return 1;
}

static void features_json(uint64_t f, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int b = 0; b < 64 && n < len; b++)
        if (f & (1ull << b)) {
            const char *nm = fk_feature_name(b);
            n += (size_t)snprintf(buf + n, len - n, "%s\"%s\"", n > 1 ? ", " : "", nm ? nm : "?");
        }
    if (n < len) snprintf(buf + n, len - n, "]");
}

static long proc_kb(const char *file, const char *key) {
    FILE *fp = fopen(file, "r");
    if (!fp) return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, key, kl) == 0) {
            v = atol(line + kl);
            break;
        }
    fclose(fp);
    return v;
}

static int read_request(const char *path, config *c, fk_json *j, char *err, size_t el) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return snprintf(err, el, "cannot open request %s", path), -1;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    if (fk_json_parse(text, j, err, el)) return -1;
    c->plan = fk_json_str(j, "model"), c->inputs = fk_json_str(j, "inputs");
    c->outputs = fk_json_str(j, "outputs");
    c->threads = (int)fk_json_num(j, "threads", 1);
    c->fused = (int)fk_json_num(j, "options.fused", 1);
    if (fk_json_str(j, "options.isa")) c->isa = fk_json_str(j, "options.isa");
    if (fk_json_str(j, "options.isa_cap")) c->isa_cap = fk_json_str(j, "options.isa_cap");
    c->warmup_runs = fk_json_num(j, "policy.warmup_runs", c->warmup_runs);
    c->warmup_min_s = fk_json_num(j, "policy.warmup_min_s", c->warmup_min_s);
    c->min_runs = fk_json_num(j, "policy.min_runs", c->min_runs);
    c->min_time_s = fk_json_num(j, "policy.min_time_s", c->min_time_s);
    c->max_time_s = fk_json_num(j, "policy.max_time_s", c->max_time_s);
    c->profile_runs = (int)fk_json_num(j, "profile_runs", c->profile_runs);
    if (!c->plan || !c->inputs) return snprintf(err, el, "request %s needs \"model\" and \"inputs\"", path), -1;
    return 0;
}

static int parse_args(int argc, char **argv, config *c, fk_json *j, char *err, size_t el) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--unfused")) { c->fused = 0; continue; }
        if (!strcmp(a, "--features")) { c->features = 1; continue; }
        if (!v) return snprintf(err, el, "option %s needs a value (see the usage at the top of main.c)", a), -1;
        i++;
        if (!strcmp(a, "--request")) { if (read_request(v, c, j, err, el)) return -1; }
        else if (!strcmp(a, "--plan")) c->plan = v;
        else if (!strcmp(a, "--check")) c->plan = v, c->check = 1;
        else if (!strcmp(a, "--inputs")) c->inputs = v;
        else if (!strcmp(a, "--outputs")) c->outputs = v;
        else if (!strcmp(a, "--isa")) c->isa = v;
        else if (!strcmp(a, "--isa-cap")) c->isa_cap = v;
        else if (!strcmp(a, "--threads")) c->threads = atoi(v);
        else if (!strcmp(a, "--warmup")) c->warmup_runs = atof(v);
        else if (!strcmp(a, "--runs")) c->min_runs = atof(v);
        else if (!strcmp(a, "--min-time")) c->min_time_s = atof(v);
        else if (!strcmp(a, "--max-time")) c->max_time_s = atof(v);
        else if (!strcmp(a, "--profile-runs")) c->profile_runs = atoi(v);
        else return snprintf(err, el, "unknown option %s", a), -1;
    }
    if (c->threads < 1 || c->threads > 256) return snprintf(err, el, "threads must be 1..256, got %d", c->threads), -1;
    return 0;
}

static void print_samples(double *ms, int n) {
    for (int s = 0; s < n; s += 64) {
        printf("{\"ev\": \"samples\", \"ms\": [");
        for (int i = s; i < n && i < s + 64; i++) printf("%s%.4f", i > s ? ", " : "", ms[i]);
        printf("]}\n");
        fflush(stdout);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Profile `runs` runs and leave in p->ms each step's MEDIAN over them: one run preempted on a
 * busy device moves a mean, not a median. Every run records the same steps in the same order.
 * *run_ms: the median wall time of the profiled runs themselves, so the report can tell a
 * per-op total that does not add up to the end-to-end latency (farm/report/opcheck.py). */
static int profile_median(fk_exec *ex, fk_prof *p, int runs, double *run_ms) {
    double *hist = malloc(sizeof(double) * (size_t)runs * FK_PROF_MAX), *col = malloc(sizeof(double) * (size_t)runs);
    double *wall = malloc(sizeof(double) * (size_t)runs);
    if (!hist || !col || !wall) return free(hist), free(col), free(wall), -1;
    for (int r = 0; r < runs; r++) {
        memset(p->ms, 0, sizeof p->ms);
        double t0 = fk_now_ms();
        fk_exec_run(ex, p);
        wall[r] = fk_now_ms() - t0;
        memcpy(hist + (size_t)r * FK_PROF_MAX, p->ms, sizeof(double) * (size_t)p->n);
    }
    for (int i = 0; i < p->n; i++) {
        for (int r = 0; r < runs; r++) col[r] = hist[(size_t)r * FK_PROF_MAX + i];
        qsort(col, (size_t)runs, sizeof *col, cmp_double);
        p->ms[i] = runs % 2 ? col[runs / 2] : 0.5 * (col[runs / 2 - 1] + col[runs / 2]);
    }
    qsort(wall, (size_t)runs, sizeof *wall, cmp_double);
    *run_ms = runs % 2 ? wall[runs / 2] : 0.5 * (wall[runs / 2 - 1] + wall[runs / 2]);
    free(hist), free(col), free(wall);
    return 0;
}

static void print_ops(const fk_prof *p, double run_ms) {
    static const char *cats[] = {"attention", "fc", "layernorm", "gelu", "other", "fallback"};
    double per[6] = {0}, total = 0;
    for (int i = 0; i < p->n; i++)
        for (int c = 0; c < 6; c++)
            if (!strcmp(p->cat[i], cats[c])) per[c] += p->ms[i], total += p->ms[i];
    printf("{\"ev\": \"ops\", \"runs\": %d, \"categories\": {", p->runs);
    for (int c = 0; c < 6; c++) printf("%s\"%s\": %.4f", c ? ", " : "", cats[c], per[c]);
    printf("}, \"total_ms\": %.4f, \"run_ms\": %.4f, \"nodes\": [", total, run_ms);
    for (int i = 0; i < p->n; i++) {
        char q[256];
        fk_json_quote(p->name[i], q, sizeof q);
        printf("%s{\"name\": %s, \"op\": \"%s\", \"category\": \"%s\", \"ms\": %.4f}", i ? ", " : "", q, p->op[i],
               p->cat[i], p->ms[i]);
    }
    printf("]}\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    static fk_json req;
    static fk_plan plan;
    static ftns_file inputs;
    static fk_prof prof;
    char err[1024], fj[512];
    config c = {.threads = 1, .fused = 1, .isa = "auto", .warmup_runs = 1, .min_runs = 10, .max_time_s = 60};
    if (parse_args(argc, argv, &c, &req, err, sizeof err)) return die(err);
    if (fk_isa_setup(c.isa_cap, err, sizeof err)) return die(err);
    uint64_t have = fk_cpu_features();
    char cap_json[48];
    snprintf(cap_json, sizeof cap_json, fk_isa_cap() ? "\"%s\"" : "null", fk_isa_cap());
    if (c.features) {
        features_json(fk_cpu_detected(), fj, sizeof fj);
        printf("{\"ev\": \"info\", \"cpu_features\": %s, \"cpu_level\": \"%s\", \"isa_cap\": %s, \"tables\": [",
               fj, fk_isa_level(fk_cpu_detected()), cap_json);
        const fk_kernels *const *all = fk_all_kernels();
        for (int i = 0; all[i]; i++)
            printf("%s{\"name\": \"%s\", \"usable\": %s}", i ? ", " : "", all[i]->name,
                   (all[i]->needs & have) == all[i]->needs ? "true" : "false");
        printf("]}\n");
        return 0;
    }
    if (!c.plan || (!c.inputs && !c.check)) return die("nothing to run: pass --request FILE, or --plan P --inputs I, or --check P");
    /* the idle baseline: the executor running, no plan loaded (memory is judged on what
       the model adds to it, the same way for every route) */
    long baseline = proc_kb("/proc/self/status", "VmHWM:");
    double t0 = fk_now_ms();
    if (fk_plan_load(c.plan, &plan, err, sizeof err)) return die(err);
    if (plan.features & ~FK_FEAT_KNOWN_MASK) {
        snprintf(err, sizeof err, "plan %s needs CPU features 0x%llx unknown to this executor: update the executor", c.plan,
                 (unsigned long long)(plan.features & ~FK_FEAT_KNOWN_MASK));
        return die(err);
    }
    if (plan.features & ~have) {
        char need[512];
        features_json(plan.features & ~have, need, sizeof need);
        if (fk_isa_cap() && !(plan.features & ~fk_cpu_detected()))
            snprintf(err, sizeof err, "plan %s needs CPU features above the ISA cap %s: %s; run it uncapped or "
                     "rebuild the plan without them", c.plan, fk_isa_cap(), need);
        else
            snprintf(err, sizeof err, "plan %s needs CPU features this CPU lacks: %s; rebuild the plan without them",
                     c.plan, need);
        return die(err);
    }
    const fk_kernels *k = fk_select(c.isa);
    if (!k) {
        snprintf(err, sizeof err, "kernel set '%s' is unknown or needs CPU features this CPU lacks%s%s (try --features)",
                 c.isa, fk_isa_cap() ? " or the ISA cap " : "", fk_isa_cap() ? fk_isa_cap() : "");
        return die(err);
    }
    if (c.check) {
        features_json(plan.features, fj, sizeof fj);
        printf("{\"ev\": \"info\", \"plan\": \"ok\", \"ops\": %u, \"tensors\": %u, \"buffers\": %u, \"bytes\": %zu, \"features\": %s}\n",
               plan.n_ops, plan.n_tensors, plan.n_bufs, plan.size, fj);
        return 0;
    }
    if (ftns_read(c.inputs, &inputs, err, sizeof err)) return die(err);
    fk_pool *pool = fk_pool_new(c.threads);
    fk_exec ex;
    if (!pool) return die("cannot create the thread pool");
    if (fk_exec_init(&ex, &plan, k, pool, c.fused, &inputs, err, sizeof err)) return die(err);
    printf("{\"ev\": \"loaded\", \"load_ms\": %.4f}\n", fk_now_ms() - t0);
    features_json(fk_cpu_detected(), fj, sizeof fj);
    printf("{\"ev\": \"info\", \"kernels\": \"%s\", \"isa_cap\": %s, \"cpu_level\": \"%s\", \"cpu_features\": %s, "
           "\"threads\": %d, \"fused\": %s, \"plan_bytes\": %zu, \"ops\": %u, \"batch\": %d, \"seq\": %d}\n",
           k->name, cap_json, fk_isa_level(fk_cpu_detected()), fj, fk_pool_size(pool), c.fused ? "true" : "false", plan.size,
           plan.n_ops, ex.B, ex.S);
    fflush(stdout);

    double t = fk_now_ms();
    fk_exec_run(&ex, NULL);
    printf("{\"ev\": \"first\", \"ms\": %.4f}\n", fk_now_ms() - t);
    fflush(stdout);
    int wr = 0;
    double w0 = fk_now_ms();
    while (wr < c.warmup_runs || fk_now_ms() - w0 < c.warmup_min_s * 1e3) fk_exec_run(&ex, NULL), wr++;
    printf("{\"ev\": \"warmup\", \"runs\": %d, \"ms_total\": %.4f}\n", wr, fk_now_ms() - w0);
    fflush(stdout);
    size_t cap = 1024, n = 0;
    double *ms = malloc(cap * sizeof(double)), s0 = fk_now_ms();
    for (;;) {
        double el = fk_now_ms() - s0;
        if (!((n < c.min_runs || el < c.min_time_s * 1e3) && el < c.max_time_s * 1e3)) break;
        if (n == cap) ms = realloc(ms, (cap *= 2) * sizeof(double));
        double a = fk_now_ms();
        fk_exec_run(&ex, NULL);
        ms[n++] = fk_now_ms() - a;
    }
    print_samples(ms, (int)n);
    if (c.profile_runs > 0) {
        double run_ms = 0;
        if (profile_median(&ex, &prof, c.profile_runs, &run_ms) != 0) return die("out of memory for the profile");
        print_ops(&prof, run_ms);
    }
    if (c.outputs) {
        char path[2048];
        size_t L = strlen(c.outputs);
        /* A directory (trailing '/') gets outputs.ftns inside it; anything else is the file. */
        snprintf(path, sizeof path, "%s%s", c.outputs, L && c.outputs[L - 1] == '/' ? "outputs.ftns" : "");
        ftns_tensor outs[FTNS_MAX_TENSORS];
        uint32_t no = fk_exec_outputs(&ex, outs, FTNS_MAX_TENSORS);
        if (ftns_write(path, outs, no)) {
            snprintf(err, sizeof err, "cannot write outputs to %s", path);
            return die(err);
        }
        char q[2100];
        fk_json_quote(path, q, sizeof q);
        printf("{\"ev\": \"outputs\", \"file\": %s}\n", q);
    }
    long hwm = proc_kb("/proc/self/status", "VmHWM:"), pss = proc_kb("/proc/self/smaps_rollup", "Pss:");
    char pss_text[32] = "null", base_text[32] = "null";
    if (pss >= 0) snprintf(pss_text, sizeof pss_text, "%ld", pss);
    if (baseline >= 0) snprintf(base_text, sizeof base_text, "%ld", baseline);
    printf("{\"ev\": \"memory\", \"vmhwm_kb\": %ld, \"pss_kb\": %s, \"baseline_kb\": %s, \"method\": \"VmHWM\"}\n",
           hwm, pss_text, base_text);
    printf("{\"ev\": \"done\"}\n");
    fflush(stdout);
    free(ms);
    fk_exec_free(&ex);
    fk_pool_free(pool);
    ftns_free(&inputs);
    fk_plan_free(&plan);
    return 0;
}
