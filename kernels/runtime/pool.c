/* Thread pool for a shared, possibly oversubscribed machine.
 *
 * A job is published as one 64-bit word `claim` = generation | hi | lo: the tasks not yet
 * claimed are [lo, hi). The caller claims from the front (lo++), workers from the back
 * (hi--), each with a compare-and-swap that only succeeds while the word still belongs to its
 * job. Taking ends, not a shared cursor, gives ops that follow each other the same rows: with
 * 2 threads the caller runs the first rows of a GEMM and of the row pass after it, the worker
 * the last ones, so an op mostly reads what its own core just wrote (cross-core reads made the
 * small row passes after a GEMM slower at 2 threads than at 1). The caller then waits for the
 * tasks to be *done*, not for the workers to check in: a worker that is asleep or descheduled
 * when a job starts costs nothing (the caller runs its share), where waiting for every worker
 * made each of the ~260 jobs of an inference pay a wake-up on a VM whose second vCPU is often
 * busy. Workers spin briefly (ops follow each other within microseconds), then sleep on a
 * condvar; the caller signals only when someone sleeps. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define SPIN_ITERS 2000 /* ~50-100 us of `pause` before a worker sleeps */
#define GEN_BITS 20
#define CNT_BITS 22
#define MAX_TASKS ((1 << CNT_BITS) - 1)
#define HI_ONE ((uint64_t)1 << CNT_BITS)

struct fk_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    _Atomic uint64_t claim; /* gen << 44 | hi << 22 | lo: tasks [lo, hi) unclaimed */
    atomic_int done;        /* tasks finished in the current job */
    atomic_uint generation; /* bumped per job; what sleeping workers wait on */
    atomic_int sleepers;
    atomic_int quit;
    fk_task_fn fn;
    void *ctx;
};

typedef struct {
    fk_pool *pool;
    int id;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Claims and runs tasks of job `gen` until none is left or the job is not current: the
 * caller (id 0) from the front, workers from the back. */
static void work(fk_pool *p, uint64_t gen, int id) {
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        const uint64_t lo = c & MAX_TASKS, hi = (c >> CNT_BITS) & MAX_TASKS;
        if (c >> (2 * CNT_BITS) != gen || lo >= hi) return;
        const uint64_t next = id == 0 ? c + 1 : c - HI_ONE, task = id == 0 ? lo : hi - 1;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, next, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* c reloaded */
        p->fn(p->ctx, (int)task, id);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    fk_pool *p = wa->pool;
    const int id = wa->id;
    unsigned seen = 0;
    free(wa);
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen && !atomic_load(&p->quit)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1); /* seq_cst: pairs with the caller's generation bump */
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        work(p, seen & ((1u << GEN_BITS) - 1), id);
    }
}

fk_pool *fk_pool_new(int n) {
    fk_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n < 1 ? 1 : n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)p->n, sizeof(pthread_t));
    for (int i = 1; i < p->n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) wa->pool = p, wa->id = i;
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

int fk_pool_size(const fk_pool *p) { return p->n; }

void fk_pool_run(fk_pool *p, int n_tasks, fk_task_fn fn, void *ctx) {
    if (p->n == 1 || n_tasks <= 1 || n_tasks > MAX_TASKS) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    /* The previous job is done (every task finished), so nobody reads fn/ctx/done now: a
     * late worker still holding the old generation fails its claim without touching them. */
    p->fn = fn, p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const unsigned gen = (atomic_load_explicit(&p->generation, memory_order_relaxed) + 1) & ((1u << GEN_BITS) - 1);
    atomic_store_explicit(&p->claim, (uint64_t)gen << (2 * CNT_BITS) | (uint64_t)n_tasks << CNT_BITS,
                          memory_order_release);
    atomic_store(&p->generation, gen); /* seq_cst: pairs with a worker's sleepers increment */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    work(p, gen, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
        if (++spins < SPIN_ITERS) cpu_relax();
        else sched_yield(); /* a worker holding a task may share our CPU */
    }
}

void fk_pool_free(fk_pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
}
