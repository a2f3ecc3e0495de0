/* Worker pool (see pool.h). One job at a time: a generation counter tells
 * workers a new job is posted; tasks are claimed with an atomic counter; the
 * last finisher signals the caller. */
#include "backend/cpu/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct cpu_pool {
    int n;
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long gen;
    int quit;
    void (*fn)(void *, int);
    void *ctx;
    int n_tasks;
    atomic_int next;
    int active; /* workers still inside the current job */
};

static void drain(cpu_pool *p) {
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i);
    }
}

static void *worker(void *arg) {
    cpu_pool *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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
    p->quit = 1;
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
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n;
    atomic_store(&p->next, 0);
    p->active = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
