/* Worker pool (see pool.h). One job at a time: a generation counter tells
 * workers a new job is posted; tasks are claimed with an atomic counter; the
 * last finisher tells the caller.
 *
 * Decode posts hundreds of small jobs per token, so both sides spin for a
 * short while (POOL_SPIN polls, some tens of microseconds) before sleeping
 * on a condition variable: a futex round trip per job showed in every
 * decode step. Lost wake-ups are excluded by the usual store/load pairs,
 * all sequentially consistent: the caller publishes the generation and then
 * reads `sleepers`; a worker counts itself in `sleepers` under the mutex and
 * then re-reads the generation, so one of the two sees the other. The same
 * holds for `active` and `caller_sleeping` at the end of a job. */
#include "backend/cpu/pool.h"

#include <pthread.h>
#include <sched.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* polls before sleeping; every 64th yields the CPU, so a spinning thread
 * does not starve a busy one when cores are oversubscribed */
#define POOL_SPIN 4096

struct cpu_pool {
    int n;
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_ulong gen;
    atomic_int quit;
    void (*fn)(void *, int);
    void *ctx;
    int n_tasks;
    atomic_int next;
    atomic_int active;          /* workers still inside the current job */
    atomic_int sleepers;        /* workers waiting on `wake` */
    atomic_int caller_sleeping; /* the caller waits on `done` */
};

static void drain(cpu_pool *p) {
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i);
    }
}

static inline void relax(int s) {
    if ((s & 63) == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
    cpu_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        for (int s = 0; s < POOL_SPIN && atomic_load(&p->gen) == seen && !atomic_load(&p->quit); s++) relax(s);
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = atomic_load(&p->gen);
        drain(p);
        if (atomic_fetch_sub(&p->active, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            if (atomic_load(&p->caller_sleeping)) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

cpu_pool *pool_new(int threads) {
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = threads < 1 ? 1 : threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->tid = calloc((size_t)p->n, sizeof *p->tid);
    int started = 1;
    for (int i = 1; i < p->n && p->tid; i++) {
        if (pthread_create(&p->tid[i], NULL, worker, p)) break;
        started++;
    }
    p->n = started; /* fewer threads if the system refused some */
    return p;
}

void pool_free(cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}

int pool_threads(const cpu_pool *p) { return p->n; }

void pool_run(cpu_pool *p, void (*fn)(void *, int), void *ctx, int n) {
    if (n <= 0) return;
    if (p->n == 1 || n == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    /* workers of the previous job have all left drain() (active reached 0),
     * so the job fields can be rewritten before the generation moves */
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n;
    atomic_store(&p->next, 0);
    atomic_store(&p->active, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    drain(p);
    for (int s = 0; s < POOL_SPIN && atomic_load(&p->active) > 0; s++) relax(s);
    if (atomic_load(&p->active) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->mu);
    }
}
