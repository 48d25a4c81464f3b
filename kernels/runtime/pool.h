/* A fixed pthread pool: fk_pool_run(pool, n_tasks, fn, ctx) runs fn(ctx, task, thread) for
 * task in [0, n_tasks) on all threads (the caller included) and returns when all are done.
 * Workers spin briefly between jobs (ops follow each other within microseconds), then sleep. */
#ifndef FK_POOL_H
#define FK_POOL_H

typedef void (*fk_task_fn)(void *ctx, int task, int thread);
typedef struct fk_pool fk_pool;

fk_pool *fk_pool_new(int n_threads);
void fk_pool_free(fk_pool *pool);
int fk_pool_size(const fk_pool *pool);
void fk_pool_run(fk_pool *pool, int n_tasks, fk_task_fn fn, void *ctx);

#endif
