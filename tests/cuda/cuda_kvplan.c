/* The KV plan against the GPU's memory (make test-cuda; needs a GPU):
 *   cuda_kvplan [MODEL]
 *
 * 1. For the 31B and 12B shapes at 131072 positions and the 31B at 262144,
 *    in every KV type, the caches gemma4_kv_alloc makes (the state's own
 *    allocation path: no weights needed) take, by the device's free
 *    memory (backend mem_used), at least the plan's bytes and at most the
 *    plan's plus the driver's rounding of each allocation (2 MiB pages:
 *    two allocations per layer), and all of it comes back when they go.
 * 2. With MODEL (run.sh: the demo model), for every KV type: a session's
 *    weights, caches and tile buffers take at least weights + plan and at
 *    most that plus the backend's work reserve (the upload staging and
 *    the rounding live there); an engine told the GPU has 1 MiB free
 *    refuses before loading, naming the GPU, the bytes needed and free. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/gemma4.h"
#include "model/gemma4_kvplan.h"
#include "model/gemma4_run.h"
#include "test.h"

#define PAGE ((uint64_t)2 << 20)

static uint64_t used(backend *b) { return b->mem_used ? (uint64_t)b->mem_used(b) : 0; }

static void check_plan_alloc(backend *b, const char *profile, int n_ctx, gemma4_kv_type t) {
    const gemma4_profile *p = gemma4_profile_find(profile);
    gemma4_kv_plan plan;
    gem_err err = {{0}};
    CHECKF(p && !gemma4_kv_plan_make(p, n_ctx, t, gemma4_ring_slack(b), 2048, &plan, &err), "%s", err.msg);
    if (!p) return;
    b->sync(b);
    const uint64_t before = used(b);
    be_kv *kv[64] = {0};
    int ok = p->n_layer <= 64;
    for (uint32_t il = 0; ok && il < p->n_layer; il++) {
        kv[il] = gemma4_kv_alloc(&plan, b, il, &err);
        CHECKF(kv[il] != NULL, "%s at %d, %s: layer %u: %s", profile, n_ctx, gemma4_kv_type_name(t), il, err.msg);
        ok = kv[il] != NULL;
    }
    b->sync(b);
    const uint64_t took = used(b) - before, slack = 2 * p->n_layer * PAGE;
    printf("cuda_kvplan: %s at %d, --kv-type %s: plan %" PRIu64 " bytes, the GPU gave %" PRIu64 " (+%.2f%%)\n", profile,
           n_ctx, gemma4_kv_type_name(t), plan.kv_bytes, took, 100.0 * ((double)took - plan.kv_bytes) / plan.kv_bytes);
    if (ok) {
        CHECKF(took >= plan.kv_bytes && took <= plan.kv_bytes + slack,
               "%s at %d, %s: the caches took %" PRIu64 " bytes of device memory, the plan says %" PRIu64
               " (+ at most %" PRIu64 " of rounding)",
               profile, n_ctx, gemma4_kv_type_name(t), took, plan.kv_bytes, slack);
    }
    for (uint32_t il = 0; il < p->n_layer && il < 64; il++)
        if (kv[il]) b->kv_free(b, kv[il]);
    b->sync(b);
    CHECKF(used(b) <= before + PAGE, "%s at %d, %s: %" PRIu64 " bytes still held after freeing the caches", profile,
           n_ctx, gemma4_kv_type_name(t), used(b) - before);
}

/* The demo model's session in one KV type: what it takes against weights
 * + plan, and a refusal when the GPU is said to be nearly full. */
static void check_session(const char *model, gemma4_kv_type t, size_t b_reserve) {
    gem_err err = {{0}};
    gem_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    o.backend = "cuda";
    o.n_ctx = 1024;
    o.kv_type = t;
    o.mem_free = 1 << 20;
    gem_engine *e = gem_engine_open(&o, &err);
    CHECKF(e == NULL, "an engine told the GPU has 1 MiB free opened %s", model);
    gem_engine_close(e);
    CHECK_ERR(err.msg, "does not fit");
    CHECK_ERR(err.msg, "the GPU has 1.00 MiB (1048576 bytes) free");
    CHECK_ERR(err.msg, "weights ");
    o.mem_free = 0;
    e = gem_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    const gem_mem_plan *plan = gem_engine_plan(e);
    /* the weights as the backend keeps them: the file's tensors here
     * (q4_0 and f32, kept as stored) */
    gguf_file *f = gguf_open(model, &err);
    uint64_t weights = 0;
    for (uint64_t i = 0; f && i < gguf_tensor_count(f); i++) weights += gguf_tensor_at(f, i)->n_bytes;
    gguf_close(f);
    const uint64_t before = gem_engine_mem_used(e);
    gem_session *s = gem_session_new(e, &err);
    CHECKF(s != NULL, "%s", err.msg);
    const uint64_t took = gem_engine_mem_used(e) - before, want = weights + plan->state_bytes + plan->act_bytes;
    printf("cuda_kvplan: %s, --kv-type %s: weights + plan %" PRIu64 " bytes, a session took %" PRIu64 "\n", model,
           gemma4_kv_type_name(t), want, took);
    CHECKF(took >= want && took <= want + (uint64_t)b_reserve,
           "%s, %s: a session took %" PRIu64 " bytes, weights + plan are %" PRIu64 " (+ at most the work reserve)",
           model, gemma4_kv_type_name(t), took, want);
    gem_session_free(s);
    gem_engine_close(e);
}

int main(int argc, char **argv) {
    gem_err err = {{0}};
    backend_opts bo;
    memset(&bo, 0, sizeof bo);
    backend *b = backend_create("cuda", &bo, &err);
    CHECKF(b != NULL, "%s", err.msg);
    const size_t reserve = b ? b->work_reserve : 0;
    if (b) {
        CHECK(b->kv_f16 && b->mem_used && b->weight_bytes);
        for (int t = 0; t < GEMMA4_KV_TYPES; t++) {
            check_plan_alloc(b, "gemma4-31b", 131072, (gemma4_kv_type)t);
            check_plan_alloc(b, "gemma4-12b", 131072, (gemma4_kv_type)t);
            check_plan_alloc(b, "gemma4-31b", 262144, (gemma4_kv_type)t); /* f32: 41.6 GiB, on an H100 too */
        }
        CHECKF(b->status(b, &err) == 0, "%s", err.msg);
        b->destroy(b);
    }
    if (argc > 1)
        for (int t = 0; t < GEMMA4_KV_TYPES; t++) check_session(argv[1], (gemma4_kv_type)t, reserve);
    return test_report("cuda_kvplan");
}
