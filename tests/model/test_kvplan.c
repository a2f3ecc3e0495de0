/* The KV plan (model/gemma4_kvplan.h):
 *  - the allocation at 128K (131072) of the 31B and 12B profiles in every
 *    KV type, pinned to byte counts derived here from the published
 *    hyperparameters (layers, KV heads, head dims, window; full attention
 *    every sixth layer and the last), not from gem's profile table, and
 *    the 31B at 262144;
 *  - the other parts: checkpoint (a ring holds at most its capacity),
 *    the tile's activation buffers, KV type names, the context's default,
 *    cap and refusal;
 *  - the capacity check's message: bytes needed (and parts) and free, and
 *    what fits instead (another KV type, the largest context);
 *  - the CPU backend allocates exactly the plan (gemma4_kv_alloc, every
 *    layer of the 1b profile at its 32768) and refuses f16 caches by name;
 *  - the engine: its plan is the one for its context, tile and ring slack;
 *    it refuses before loading a context past the trained one, f16 caches
 *    on the CPU and a plan larger than the memory it is told is free. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/gemma4.h"
#include "model/gemma4_kvplan.h"
#include "model/gemma4_run.h"
#include "synth_tiny.h"
#include "test.h"

/* The published shapes (config.json of google/gemma-4-31B and -12B):
 * num_hidden_layers, num_key_value_heads (sliding), num_global_key_value_heads,
 * head_dim, global_head_dim, sliding_window. */
typedef struct {
    const char *name;
    uint64_t layers, kvh_swa, kvh_full, hd_swa, hd_full, window;
} shape;
static const shape shapes[] = {
    {"gemma4-31b", 60, 16, 4, 256, 512, 1024},
    {"gemma4-12b", 48, 8, 1, 256, 512, 1024},
};

#define SLACK 16 /* BE_EXACT_ROWS: the rings of gem's row-exact backends */

static uint64_t n_full(const shape *s) {
    uint64_t n = 0;
    for (uint64_t il = 0; il < s->layers; il++) n += il % 6 == 5 || il + 1 == s->layers;
    return n;
}

/* Bytes of keys and values: slots x heads x dims x 2 (K, V) x entry size. */
static uint64_t kv(uint64_t slots, uint64_t heads, uint64_t dims, int f16) {
    return slots * heads * dims * 2 * (f16 ? 2 : 4);
}

static void test_pinned(void) {
    gem_err err = {{0}};
    /* the totals for f32 at 128K, by hand: 31B 50 rings x 1040 x 16 x 256
     * x 8 bytes + 10 caches x 131072 x 4 x 512 x 8 bytes; 12B 40 x 1040 x
     * 8 x 256 x 8 + 8 x 131072 x 1 x 512 x 8 */
    const uint64_t f32_128k[2] = {1703936000ull + 21474836480ull, 681574400ull + 4294967296ull};
    CHECK(f32_128k[0] == 23178772480ull && f32_128k[1] == 4976541696ull);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        const gemma4_profile *p = gemma4_profile_find(s->name);
        CHECKF(p != NULL, "no profile %s", s->name);
        if (!p) continue;
        const uint64_t nf = n_full(s), ns = s->layers - nf;
        CHECK(nf == (si == 0 ? 10u : 8u));
        for (int ci = 0; ci < 2; ci++) {
            const uint64_t ctx = ci ? 262144 : 131072;
            if (ci && si) continue; /* 262144: the 31B */
            for (int t = 0; t < GEMMA4_KV_TYPES; t++) {
                const int f16_swa = t == GEMMA4_KV_F16, f16_full = t != GEMMA4_KV_F32;
                const uint64_t ring = kv(s->window + SLACK, s->kvh_swa, s->hd_swa, f16_swa);
                const uint64_t full = kv(ctx, s->kvh_full, s->hd_full, f16_full);
                gemma4_kv_plan plan;
                CHECKF(!gemma4_kv_plan_make(p, (int)ctx, (gemma4_kv_type)t, SLACK, 2048, &plan, &err), "%s", err.msg);
                const gemma4_kv_kind *sw = &plan.kind[GEMMA4_KV_SLIDING], *fu = &plan.kind[GEMMA4_KV_FULL];
                CHECKF(sw->layers == ns && fu->layers == nf, "%s: %u sliding and %u full layers", s->name, sw->layers,
                       fu->layers);
                CHECK(sw->capacity == s->window + SLACK && sw->ring && fu->capacity == ctx && !fu->ring);
                CHECK(sw->f16 == f16_swa && fu->f16 == f16_full);
                CHECKF(sw->layer_bytes == ring && sw->bytes == ns * ring, "%s %s: ring %" PRIu64 " (want %" PRIu64 ")",
                       s->name, gemma4_kv_type_name((gemma4_kv_type)t), sw->layer_bytes, ring);
                CHECKF(fu->layer_bytes == full && fu->bytes == nf * full,
                       "%s %s at %" PRIu64 ": full %" PRIu64 " (want %" PRIu64 ")", s->name,
                       gemma4_kv_type_name((gemma4_kv_type)t), ctx, fu->layer_bytes, full);
                CHECKF(plan.kv_bytes == ns * ring + nf * full, "%s %s at %" PRIu64 ": %" PRIu64 " bytes", s->name,
                       gemma4_kv_type_name((gemma4_kv_type)t), ctx, plan.kv_bytes);
                if (!ci && t == GEMMA4_KV_F32) CHECK(plan.kv_bytes == f32_128k[si]);
                /* f16 halves everything; f16-full only the full caches */
                if (!ci && t == GEMMA4_KV_F16) CHECK(2 * plan.kv_bytes == f32_128k[si]);
                if (!ci && t == GEMMA4_KV_F16_FULL) CHECK(plan.kv_bytes == f32_128k[si] - nf * full);
                /* a full checkpoint: every ring whole, every full cache,
                 * the logits and the hidden state */
                CHECK(plan.checkpoint_bytes == plan.kv_bytes + (262144 + (uint64_t)p->n_embd) * 4);
            }
        }
    }
    /* the pinned numbers as printed in the README table */
    gemma4_kv_plan a;
    CHECK(!gemma4_kv_plan_make(gemma4_profile_find("gemma4-31b"), 131072, GEMMA4_KV_F16_FULL, SLACK, 2048, &a, &err));
    CHECK(a.kv_bytes == 12441354240ull);
    CHECK(!gemma4_kv_plan_make(gemma4_profile_find("gemma4-31b"), 131072, GEMMA4_KV_F16, SLACK, 2048, &a, &err));
    CHECK(a.kv_bytes == 11589386240ull);
    CHECK(!gemma4_kv_plan_make(gemma4_profile_find("gemma4-12b"), 131072, GEMMA4_KV_F16_FULL, SLACK, 2048, &a, &err));
    CHECK(a.kv_bytes == 2829058048ull);
    CHECK(!gemma4_kv_plan_make(gemma4_profile_find("gemma4-12b"), 131072, GEMMA4_KV_F16, SLACK, 2048, &a, &err));
    CHECK(a.kv_bytes == 2488270848ull);
}

static void test_parts(void) {
    gem_err err = {{0}};
    const gemma4_profile *p = gemma4_profile_find("gemma4-31b"), *tiny = gemma4_profile_find("gemma4-tiny");
    gemma4_kv_plan plan;
    /* the tile's buffers: five of T x hidden (residual, normed, attention
     * output, down projection, last), q and the attention of every head at
     * 512, k and v of the most KV heads (16) at 512, T x ffn, the logits,
     * the argmax and the top-k's 2 x 128 */
    CHECK(!gemma4_kv_plan_make(p, 4096, GEMMA4_KV_F32, SLACK, 2048, &plan, &err));
    const uint64_t T = 2048;
    const uint64_t floats = T * (5 * 5376 + 2 * 32 * 512 + 2 * 16 * 512 + 21504) + 262144 + 1 + 256;
    CHECKF(plan.act_bytes == 4 * floats, "31B tile of 2048: %" PRIu64 " bytes", plan.act_bytes);
    size_t fl[G4T_COUNT];
    gemma4_tile_floats(p, 2048, fl);
    uint64_t sum = 0;
    for (int i = 0; i < G4T_COUNT; i++) sum += fl[i];
    CHECK(sum == floats && fl[G4T_ACT] == T * 21504 && fl[G4T_K] == T * 16 * 512);
    CHECK(gemma4_kv_plan_total(&plan) == plan.kv_bytes + plan.act_bytes);
    /* a context shorter than the ring: a checkpoint holds the filled slots */
    CHECK(!gemma4_kv_plan_make(tiny, 20, GEMMA4_KV_F32, SLACK, 64, &plan, &err));
    CHECK(plan.kind[GEMMA4_KV_SLIDING].capacity == 32 + SLACK && plan.kind[GEMMA4_KV_FULL].capacity == 20);
    CHECK(plan.checkpoint_bytes == (262144 + 256) * 4 + 5 * kv(20, 2, 256, 0) + kv(20, 1, 512, 0));
    /* no slack: rings of the window alone */
    CHECK(!gemma4_kv_plan_make(tiny, 100, GEMMA4_KV_F32, 0, 64, &plan, &err));
    CHECK(plan.kind[GEMMA4_KV_SLIDING].capacity == 32);
    /* refusals */
    CHECK(gemma4_kv_plan_make(tiny, 0, GEMMA4_KV_F32, SLACK, 64, &plan, &err) == -1);
    CHECK_ERR(err.msg, "the context must be positive");
    CHECK(gemma4_kv_plan_make(tiny, 100, (gemma4_kv_type)7, SLACK, 64, &plan, &err) == -1);
    CHECK_ERR(err.msg, "KV type 7 is not one of f32, f16 or f16-full");
    CHECK(gemma4_kv_plan_make(gemma4_profile_find("gemma4-tiny-assistant"), 100, GEMMA4_KV_F32, SLACK, 64, &plan,
                              &err) == -1);
    CHECK_ERR(err.msg, "keeps no KV caches");
    /* names */
    for (int t = 0; t < GEMMA4_KV_TYPES; t++) CHECK(gemma4_kv_type_parse(gemma4_kv_type_name((gemma4_kv_type)t)) == t);
    CHECK(!strcmp(gemma4_kv_type_name(GEMMA4_KV_F16_FULL), "f16-full"));
    CHECK(gemma4_kv_type_parse("f8") == -1 && gemma4_kv_type_parse(NULL) == -1 && gemma4_kv_type_parse("F16") == -1);
    CHECK(gemma4_kv_type_f16(GEMMA4_KV_F16_FULL, 1) && !gemma4_kv_type_f16(GEMMA4_KV_F16_FULL, 0));
    /* the context: the default capped at the trained one, more refused */
    int n = 0;
    CHECK(!gemma4_ctx_resolve(0, 262144, "m.gguf", &n, &err) && n == GEMMA4_CTX_DEFAULT);
    CHECK(!gemma4_ctx_resolve(0, 1024, "m.gguf", &n, &err) && n == 1024);
    CHECK(!gemma4_ctx_resolve(262144, 262144, "m.gguf", &n, &err) && n == 262144);
    CHECK(!gemma4_ctx_resolve(300000, 0, "m.gguf", &n, &err) && n == 300000); /* trained unknown: no cap */
    CHECK(gemma4_ctx_resolve(262145, 262144, "m.gguf", &n, &err) == -1);
    CHECK_ERR(err.msg, "a context of 262145 exceeds the model's trained context of 262144 (m.gguf)");
    char h[32];
    CHECK(!strcmp(gemma4_human_bytes(3ull << 30, h, sizeof h), "3.00 GiB"));
    CHECK(!strcmp(gemma4_human_bytes(1536ull << 10, h, sizeof h), "1.50 MiB"));
    CHECK(!strcmp(gemma4_human_bytes(100, h, sizeof h), "100 bytes"));
}

static void test_fit(void) {
    gem_err err = {{0}};
    const gemma4_profile *p = gemma4_profile_find("gemma4-31b");
    gemma4_kv_plan plan;
    CHECK(!gemma4_kv_plan_make(p, 262144, GEMMA4_KV_F32, SLACK, 2048, &plan, &err));
    const uint64_t G = 1ull << 30, weights = 17 * G, reserve = G, free_b = 40 * G;
    const uint64_t need = weights + reserve + plan.kv_bytes + plan.act_bytes;
    CHECK(gemma4_fit_check(&plan, weights, reserve, need, "the GPU", &err) == 0); /* exactly enough */
    CHECK(gemma4_fit_check(&plan, weights, reserve, free_b, "the GPU", &err) == -1);
    char want[512];
    /* 763.00 MiB: the tile's 200016129 floats (test_parts) */
    CHECK(plan.act_bytes == 800064516ull);
    snprintf(want, sizeof want,
             "a context of 262144 tokens with --kv-type f32 does not fit: it needs %.2f GiB (%" PRIu64
             " bytes: weights 17.00 GiB, KV caches %.2f GiB, activations 763.00 MiB, working reserve 1.00 GiB) and "
             "the GPU has 40.00 GiB (42949672960 bytes) free; ",
             need / (double)G, need, plan.kv_bytes / (double)G);
    CHECK_ERR(err.msg, want);
    /* f16-full (f32 rings, 20 GiB of f16 full caches) needs 40.4 GiB here:
     * not offered; f16 (the rings halved too) needs 39.6 */
    gemma4_kv_plan o;
    CHECK(!gemma4_kv_plan_make(p, 262144, GEMMA4_KV_F16_FULL, SLACK, 2048, &o, &err));
    CHECK(weights + reserve + gemma4_kv_plan_total(&o) > free_b);
    CHECK(!gemma4_kv_plan_make(p, 262144, GEMMA4_KV_F16, SLACK, 2048, &o, &err));
    CHECK(weights + reserve + gemma4_kv_plan_total(&o) <= free_b);
    snprintf(want, sizeof want, "--kv-type f16 fits (it needs %.2f GiB)",
             (weights + reserve + gemma4_kv_plan_total(&o)) / (double)G);
    CHECK_ERR(err.msg, want);
    CHECK(strstr(err.msg, "f16-full fits") == NULL);
    /* the largest f32 context: what is left after everything but the full
     * caches, over 10 layers x 4 heads x 512 x 2 x 4 bytes per position */
    const uint64_t fixed = need - plan.kind[GEMMA4_KV_FULL].bytes, per_pos = 10 * 4 * 512 * 2 * 4;
    snprintf(want, sizeof want, "--ctx %" PRIu64 " at most with --kv-type f32", (free_b - fixed) / per_pos);
    CHECK_ERR(err.msg, want);
    /* nothing fits: the fixed part alone is too much */
    CHECK(gemma4_fit_check(&plan, 50 * G, reserve, free_b, "this machine (MemAvailable)", &err) == -1);
    CHECK_ERR(err.msg, "this machine (MemAvailable) has 40.00 GiB");
    CHECK_ERR(err.msg, "the weights and fixed buffers alone need");
}

/* The CPU backend holds exactly the plan's bytes, layer by layer. */
static void test_cpu_alloc(void) {
    gem_err err = {{0}};
    backend_opts bo = {1, 0, 0, 0};
    backend *b = backend_create("cpu", &bo, &err);
    CHECKF(b != NULL, "%s", err.msg);
    if (!b) return;
    CHECK(!b->kv_f16 && b->weight_bytes == NULL && b->mem_free == NULL);
    const gemma4_profile *p = gemma4_profile_find("gemma4-1b");
    gemma4_kv_plan plan;
    CHECK(!gemma4_kv_plan_make(p, 32768, GEMMA4_KV_F32, gemma4_ring_slack(b), 64, &plan, &err));
    CHECK(plan.ring_slack == BE_EXACT_ROWS);
    uint64_t sum = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        be_kv *kv = gemma4_kv_alloc(&plan, b, il, &err);
        CHECKF(kv != NULL, "%s", err.msg);
        if (!kv) continue;
        const gemma4_kv_kind *k = gemma4_kv_plan_kind(&plan, il);
        CHECK(k == &plan.kind[gemma4_layer_is_full(p, il) ? GEMMA4_KV_FULL : GEMMA4_KV_SLIDING]);
        const uint64_t held = b->kv_bytes(b, kv, (int)k->capacity);
        CHECKF(held == k->layer_bytes, "layer %u: %" PRIu64 " bytes, the plan %" PRIu64, il, held, k->layer_bytes);
        sum += held;
        b->kv_free(b, kv);
    }
    CHECK(sum == plan.kv_bytes);
    /* f16 caches: refused by name, by the plan's allocation and by kv_new */
    CHECK(!gemma4_kv_plan_make(p, 1024, GEMMA4_KV_F16_FULL, gemma4_ring_slack(b), 64, &plan, &err));
    be_kv *ring = gemma4_kv_alloc(&plan, b, 0, &err); /* layer 0: sliding, f32 */
    CHECKF(ring != NULL, "%s", err.msg);
    if (ring) b->kv_free(b, ring);
    CHECK(gemma4_kv_alloc(&plan, b, 5, &err) == NULL); /* layer 5: full, f16 */
    CHECK_ERR(err.msg, "--kv-type f16-full: backend 'cpu' keeps its KV caches in f32");
    CHECK(b->kv_new(b, 1, 512, 16, 0, BE_KV_F16, &err) == NULL);
    CHECK_ERR(err.msg, "backend 'cpu' keeps its KV caches in f32");
    b->destroy(b);
}

/* The engine plans its context before loading and refuses what does not
 * fit or is not kept, naming why. */
static void test_engine(const char *model) {
    gem_err err = {{0}};
    gem_engine_opts o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    o.n_ctx = 2048;
    o.tile = 32;
    gem_engine *e = gem_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (e) {
        const gem_mem_plan *plan = gem_engine_plan(e);
        gemma4_kv_plan want;
        CHECK(!gemma4_kv_plan_make(gemma4_profile_find("gemma4-tiny"), 2048, GEMMA4_KV_F32, SLACK, 32, &want, &err));
        CHECK(plan->n_ctx == want.n_ctx && plan->tile == want.tile && !strcmp(plan->kv_type, "f32"));
        CHECK(plan->state_bytes == want.kv_bytes && plan->act_bytes == want.act_bytes &&
              plan->checkpoint_bytes == want.checkpoint_bytes);
        CHECK(gem_engine_n_ctx(e) == 2048);
        /* the state holds the plan's caches */
        gem_session *s = gem_session_new(e, &err);
        CHECKF(s != NULL, "%s", err.msg);
        gem_session_free(s);
        gem_engine_close(e);
    }
    o.n_ctx = 4097; /* the tiny profile's trained context is 4096 */
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECK_ERR(err.msg, "a context of 4097 exceeds the model's trained context of 4096");
    o.n_ctx = 4096;
    o.kv_type = GEMMA4_KV_F16_FULL;
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECK_ERR(err.msg, "--kv-type f16-full: backend 'cpu' keeps its KV caches in f32 (f16 caches are a CUDA option)");
    o.kv_type = GEMMA4_KV_F32;
    o.mem_free = 1 << 20; /* the tiny model's plan at 4096 and tile 32: 24.5 MiB, + the 64 MiB reserve */
    CHECK(gem_engine_open(&o, &err) == NULL);
    CHECK_ERR(err.msg, "a context of 4096 tokens with --kv-type f32 does not fit: it needs ");
    CHECK_ERR(err.msg, "weights 0 bytes, KV caches ");
    CHECK_ERR(err.msg, "this machine (MemAvailable) has 1.00 MiB (1048576 bytes) free");
    o.mem_free = 1ull << 40;
    e = gem_engine_open(&o, &err);
    CHECKF(e != NULL, "%s", err.msg);
    gem_engine_close(e);
}

int main(void) {
    test_pinned();
    test_parts();
    test_fit();
    test_cpu_alloc();
    char model[] = "/tmp/gem-kvplan-XXXXXX";
    gem_err err = {{0}};
    CHECKF(!test_tmp_file(model) && !test_synth_tiny(model, 7, 0, &err), "%s", err.msg);
    test_engine(model);
    unlink(model);
    return test_report("test_kvplan");
}
