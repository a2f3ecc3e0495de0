/* A persistent worker pool: pool_run(fn, ctx, n) calls fn(ctx, i) for every
 * i in [0, n) across the workers and the calling thread, and returns when
 * all are done. Workers sleep on a condition variable between runs, so a
 * decode step's many small launches cost a wake-up, not a thread spawn. */
#ifndef GEM_BACKEND_CPU_POOL_H
#define GEM_BACKEND_CPU_POOL_H

typedef struct cpu_pool cpu_pool;

cpu_pool *pool_new(int threads);
void pool_free(cpu_pool *p);
int pool_threads(const cpu_pool *p);
void pool_run(cpu_pool *p, void (*fn)(void *ctx, int i), void *ctx, int n);

#endif
