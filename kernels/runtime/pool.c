/* Thread pool: a job generation counter wakes workers; tasks are claimed with an atomic
 * counter so uneven tasks balance themselves. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERS 20000

struct fk_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_int generation;
    atomic_int next_task;
    atomic_int pending; /* workers still inside the current job */
    atomic_int quit;
    int n_tasks;
    fk_task_fn fn;
    void *ctx;
};

typedef struct {
    fk_pool *pool;
    int id;
} worker_arg;

static void work(fk_pool *p, int id) {
    for (;;) {
        int t = atomic_fetch_add(&p->next_task, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, id);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    fk_pool *p = wa->pool;
    int id = wa->id, seen = 0;
    free(wa);
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen && !atomic_load(&p->quit)) {
            if (++spins < SPIN_ITERS) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#elif defined(__aarch64__)
                __asm__ volatile("yield");
#endif
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load(&p->generation);
        work(p, id);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
        wa->pool = p, wa->id = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

int fk_pool_size(const fk_pool *p) { return p->n; }

void fk_pool_run(fk_pool *p, int n_tasks, fk_task_fn fn, void *ctx) {
    if (p->n == 1 || n_tasks <= 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn, p->ctx = ctx, p->n_tasks = n_tasks;
    atomic_store(&p->next_task, 0);
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    work(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        if (++spins > SPIN_ITERS) sched_yield();
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
