/* gem inspect: what a GGUF file is and whether gem will run it, and with
 * --ctx the KV plan of a context (gemma4_kvplan.h): the bytes of each kind
 * of cache, per layer and in all, as gem run and gem serve would allocate
 * them.
 *
 * Prints whatever could be read even for a rejected model (architecture,
 * tensor counts) so the verdict line can be understood; exit status is 0
 * only for a supported model (and, with --ctx, a context it takes). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h" /* BE_EXACT_ROWS: the rings' slack on gem's backends */
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/gemma4.h"
#include "model/gemma4_kvplan.h"
#include "model/qwen35.h"
#include "model/qwen35_run.h" /* qwen35_plan */
#include "quant/quant.h"
#include "tok/tok.h"

#define H200_HBM_BYTES_PER_S 4.8e12

static void print_value(const gguf_file *f, uint64_t i) {
    gguf_vtype t = gguf_kv_type(f, i);
    int64_t iv;
    double fv;
    int b;
    gguf_str s;
    if (t == GGUF_T_STRING && !gguf_kv_str(f, i, &s)) {
        printf("\"%.*s%s\"", (int)(s.len > 80 ? 80 : s.len), s.ptr, s.len > 80 ? "..." : "");
    } else if (t == GGUF_T_ARRAY) {
        uint64_t n = gguf_kv_arr_len(f, i);
        gguf_vtype et = gguf_kv_arr_type(f, i);
        printf("[%s x %" PRIu64 "]", gguf_vtype_name(et), n);
        if (n <= 64 && et != GGUF_T_STRING) {
            printf(" ");
            for (uint64_t k = 0; k < n; k++) {
                if (!gguf_kv_arr_int(f, i, k, &iv)) printf("%s%" PRId64, k ? "," : "", iv);
                else if (!gguf_kv_arr_float(f, i, k, &fv)) printf("%s%g", k ? "," : "", fv);
                else if (!gguf_kv_arr_bool(f, i, k, &b)) printf("%s%d", k ? "," : "", b);
            }
        }
    } else if (!gguf_kv_int(f, i, &iv)) {
        printf("%" PRId64, iv);
    } else if (!gguf_kv_float(f, i, &fv)) {
        printf("%g", fv);
    } else if (!gguf_kv_bool(f, i, &b)) {
        printf("%s", b ? "true" : "false");
    } else {
        printf("(%s)", gguf_vtype_name(t));
    }
}

static void print_str_key(const gguf_file *f, const char *label, const char *key) {
    int64_t i = gguf_find_key(f, key);
    gguf_str s;
    if (i >= 0 && !gguf_kv_str(f, (uint64_t)i, &s))
        printf("%-14s %.*s\n", label, (int)(s.len > 120 ? 120 : s.len), s.ptr);
}

/* "12.00 GiB (12884901888 bytes)" */
static const char *bytes_str(uint64_t n, char *buf, size_t cap) {
    char h[32];
    snprintf(buf, cap, "%s (%" PRIu64 " bytes)", gemma4_human_bytes(n, h, sizeof h), n);
    return buf;
}

/* The KV plan of a context: each kind of cache per layer and in all, the
 * tile's activations and the total, then what else depends on the context
 * (a checkpoint) and the weights beside them. Rings keep BE_EXACT_ROWS
 * slots past the window: both of gem's backends (cpu, cuda) are row-exact.
 * 0, or 1 after a message when the context is refused. */
static int print_plan(const gguf_file *f, const gemma4_model *m, const char *path, int ctx, gemma4_kv_type type,
                      int tile) {
    const gemma4_profile *p = m->profile;
    gem_err err = {{0}};
    if (gemma4_is_assistant(p)) {
        printf("kv plan:       none: a drafter keeps no caches (it reads its target's)\n");
        return 0;
    }
    int n_ctx = 0;
    gemma4_kv_plan plan;
    if (gemma4_ctx_resolve(ctx, gemma4_trained_ctx(f, p), path, &n_ctx, &err) ||
        gemma4_kv_plan_make(p, n_ctx, type, BE_EXACT_ROWS, tile, &plan, &err)) {
        printf("kv plan:       REFUSED: %s\n", err.msg);
        fprintf(stderr, "gem inspect: error: %s\n", err.msg);
        return 1;
    }
    char b1[64], b2[64];
    printf("kv plan:       context %d tokens, --kv-type %s\n", plan.n_ctx, gemma4_kv_type_name(type));
    for (int k = 0; k < 2; k++) {
        const gemma4_kv_kind *c = &plan.kind[k];
        char slots[64];
        if (c->ring) snprintf(slots, sizeof slots, "ring slots (window %u + %d)", p->window, plan.ring_slack);
        else snprintf(slots, sizeof slots, "positions");
        printf("  %-12s %u layer%s x %u %s x %u kv heads x %u dims, K and V %s: %s per layer, %s in all\n",
               k == GEMMA4_KV_FULL ? "full:" : "sliding:", c->layers, c->layers == 1 ? "" : "s", c->capacity, slots,
               c->n_kv_head, c->head_dim, c->f16 ? "f16" : "f32", bytes_str(c->layer_bytes, b1, sizeof b1),
               bytes_str(c->bytes, b2, sizeof b2));
    }
    printf("  kv caches:   %s\n", bytes_str(plan.kv_bytes, b1, sizeof b1));
    printf("  activations: %s for prompt tiles of %d tokens (--tile; 2048 is CUDA's, 64 the CPU's)\n",
           bytes_str(plan.act_bytes, b1, sizeof b1), plan.tile);
    printf("  plan total:  %s\n", bytes_str(gemma4_kv_plan_total(&plan), b1, sizeof b1));
    printf("  checkpoint:  %s at a full context (taken only where it fits)\n",
           bytes_str(plan.checkpoint_bytes, b1, sizeof b1));
    uint64_t wb = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) wb += gguf_tensor_at(f, i)->n_bytes;
    printf("  weights:     %s in the file (CUDA keeps f32/f16/bf16/q8_0/q4_0 as stored, expands other types to f16, "
           "rounds allocations to 2 MiB pages and reserves 1.5 GiB of working memory)\n",
           bytes_str(wb, b1, sizeof b1));
    return 0;
}

/* A Qwen3.5 hybrid (qwen35.h): the profile, its layer kinds and the
 * per-sequence state that does not grow with the context; with ctx >= 0
 * the plan of a session of that context (qwen35_plan: its attention
 * caches are all full-context, so f16 and f16-full are the same). */
static int inspect_qwen35(const gguf_file *f, const char *path, int ctx, gemma4_kv_type type, int tile) {
    gem_err err = {{0}};
    qwen35_model *m = qwen35_bind(f, &err);
    if (!m) {
        printf("verdict:       REJECTED: %s\n", err.msg);
        fprintf(stderr, "gem inspect: error: %s\n", err.msg);
        return 1;
    }
    const qwen35_profile *p = m->profile;
    const uint32_t n_attn = p->n_layer / QWEN35_ATTN_INTERVAL;
    printf("profile:       %s (%s)\n", p->name, p->description);
    printf("shape:         %u layers (%u Gated DeltaNet, %u gated attention), hidden %u, ffn %u, heads %u, kv heads %u, "
           "head dim %u (%u rotated), GDN heads %u qk / %u v of dim %u, vocab %u%s\n",
           p->n_layer, p->n_layer - n_attn, n_attn, p->n_embd, p->n_ff, p->n_head, p->n_head_kv, p->head_dim, p->n_rot,
           p->n_k_heads, p->n_v_heads, p->d_state, p->n_vocab, p->tied ? ", tied head" : "");
    printf("parameters:    %" PRIu64 " (%.3f B)\n", qwen35_param_count(p), qwen35_param_count(p) / 1e9);
    printf("embedding:     %s, head %s\n", quant_type_name(m->token_embd->type), quant_type_name(m->output->type));
    const uint64_t rec = (uint64_t)(p->n_layer - n_attn) *
                         ((uint64_t)p->n_v_heads * p->d_state * p->d_state + 3ull * qwen35_conv_dim(p)) * 4;
    const uint64_t kv_tok = (uint64_t)n_attn * 2 * p->n_head_kv * p->head_dim * 4;
    printf("state:         %" PRIu64 " bytes of recurrent state per sequence (f32), plus %" PRIu64
           " bytes of f32 KV per token\n", rec, kv_tok);
    uint64_t db = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) db += gguf_tensor_at(f, i)->n_bytes;
    db += m->token_embd->n_bytes / m->token_embd->ne[1];
    if (p->tied) db += m->token_embd->n_bytes - m->token_embd->n_bytes / m->token_embd->ne[1];
    printf("decode bytes:  %" PRIu64 " per token (%.3f GiB)\n", db, db / 1073741824.0);
    printf("verdict:       OK: supported (%s) by the qwen35 layer loop (CPU and CUDA)\n", p->name);
    int rc = 0;
    if (ctx >= 0) {
        char b1[64];
        int n_ctx = 0;
        if (gemma4_ctx_resolve(ctx, qwen35_trained_ctx(f), path, &n_ctx, &err)) {
            printf("kv plan:       REFUSED: %s\n", err.msg);
            fprintf(stderr, "gem inspect: error: %s\n", err.msg);
            rc = 1;
        } else {
            qwen35_mem mem;
            const int f16 = type != GEMMA4_KV_F32;
            qwen35_plan(p, n_ctx, tile, f16, &mem);
            printf("kv plan:       context %d tokens, --kv-type %s\n", n_ctx, gemma4_kv_type_name(type));
            printf("  attention:   %u layers x %d positions x %u kv heads x %u dims, K and V %s: %s in all\n", n_attn,
                   n_ctx, p->n_head_kv, p->head_dim, f16 ? "f16" : "f32", bytes_str(mem.kv_bytes, b1, sizeof b1));
            printf("  recurrent:   %s (f32, whatever the context)\n", bytes_str(mem.recurrent_bytes, b1, sizeof b1));
            printf("  activations: %s for prompt tiles of %d tokens (--tile)\n", bytes_str(mem.act_bytes, b1, sizeof b1),
                   tile);
            printf("  plan total:  %s\n", bytes_str(qwen35_mem_total(&mem), b1, sizeof b1));
            printf("  checkpoint:  %s at a full context (taken only where it fits)\n",
                   bytes_str(mem.checkpoint_bytes, b1, sizeof b1));
        }
    }
    qwen35_free(m);
    return rc;
}

int cli_inspect(int argc, char **argv) {
    const char *path = NULL;
    int show_keys = 0, show_tensors = 0, ctx = -1, tile = 2048; /* ctx -1: no plan asked for */
    gemma4_kv_type kv_type = GEMMA4_KV_F32;
    int kv_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(argv[i], "--keys")) show_keys = 1;
        else if (!strcmp(argv[i], "--tensors")) show_tensors = 1;
        else if (!strcmp(argv[i], "--ctx") || !strcmp(argv[i], "-c")) {
            if (cli_parse_num(v, 1, 1 << 24, &x) || x != (int)x)
                return cli_fail("inspect", "bad value for --ctx", v ? v : "");
            ctx = (int)x;
            i++;
        } else if (!strcmp(argv[i], "--kv-type")) {
            if (cli_kv_type_arg("inspect", v, &kv_type)) return 2;
            kv_given = 1;
            i++;
        } else if (!strcmp(argv[i], "--tile")) {
            if (cli_parse_num(v, 1, 1 << 16, &x) || x != (int)x)
                return cli_fail("inspect", "bad value for --tile", v ? v : "");
            tile = (int)x;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "gem inspect: error: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "gem inspect: error: more than one file given\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr,
                "usage: gem inspect FILE [--keys] [--tensors] [--ctx N [--kv-type f32|f16|f16-full] [--tile T]]\n");
        return 2;
    }
    if (kv_given && ctx < 0) return cli_fail("inspect", "--kv-type plans a context: give --ctx N too", NULL);
    gem_err err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "gem inspect: error: %s\n", err.msg);
        printf("verdict:       REJECTED: %s\n", err.msg);
        return 1;
    }
    printf("file:          %s\n", path);
    printf("size:          %" PRIu64 " bytes (%.2f GiB)\n", gguf_file_size(f), gguf_file_size(f) / 1073741824.0);
    printf("gguf:          version %u, alignment %u, %" PRIu64 " metadata keys, %" PRIu64 " tensors\n",
           gguf_version(f), gguf_alignment(f), gguf_kv_count(f), gguf_tensor_count(f));
    print_str_key(f, "architecture:", "general.architecture");
    print_str_key(f, "name:", "general.name");

    uint64_t by_type[QT_COUNT] = {0};
    uint64_t bytes_by_type[QT_COUNT] = {0};
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        by_type[t->type]++;
        bytes_by_type[t->type] += t->n_bytes;
    }
    printf("tensor types: ");
    for (int t = 0; t < QT_COUNT; t++)
        if (by_type[t])
            printf(" %s %" PRIu64 " (%.2f GiB)", quant_type_name((uint32_t)t), by_type[t], bytes_by_type[t] / 1073741824.0);
    printf("\n");

    if (show_keys) {
        for (uint64_t i = 0; i < gguf_kv_count(f); i++) {
            printf("  key %-44s ", gguf_kv_key(f, i));
            print_value(f, i);
            printf("\n");
        }
    }
    if (show_tensors) {
        for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            printf("  tensor %-36s %-6s [", t->name, quant_type_name(t->type));
            for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
            printf("] offset %" PRIu64 " bytes %" PRIu64 "\n", t->offset, t->n_bytes);
        }
    }

    /* a Qwen3.5 file is described by its own contract */
    int64_t ai = gguf_find_key(f, "general.architecture");
    gguf_str arch;
    if (ai >= 0 && !gguf_kv_str(f, (uint64_t)ai, &arch) && gguf_str_eq(arch, QWEN35_ARCH)) {
        const int qrc = inspect_qwen35(f, path, ctx, kv_type, tile);
        gguf_close(f);
        return qrc;
    }
    gemma4_model *m = gemma4_bind(f, &err);
    if (!m) {
        printf("verdict:       REJECTED: %s\n", err.msg);
        fprintf(stderr, "gem inspect: error: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    /* the vocabulary too: a file `gem run` refuses is not "OK" here (a
     * drafter may come without one: it reads ids, never text) */
    const int no_vocab = gemma4_is_assistant(m->profile) && gguf_find_key(f, "tokenizer.ggml.model") < 0;
    tok *tk = no_vocab ? NULL : tok_load(f, &err);
    if (!tk && !no_vocab) {
        printf("verdict:       REJECTED: tokenizer: %s\n", err.msg);
        fprintf(stderr, "gem inspect: error: tokenizer: %s\n", err.msg);
        gemma4_free(m);
        gguf_close(f);
        return 1;
    }
    const gemma4_profile *p = m->profile;
    uint32_t n_full = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) n_full += m->layers[il].is_full;
    printf("profile:       %s (%s)\n", p->name, p->description);
    printf("shape:         %u layers (%u sliding, %u full), hidden %u, ffn %u, heads %u, kv heads %u/%u, "
           "head dim %u/%u, window %u, vocab %u\n",
           p->n_layer, p->n_layer - n_full, n_full, p->n_embd, p->n_ff, p->n_head, p->n_head_kv_swa,
           p->n_head_kv_full, GEMMA4_HEAD_DIM_SWA, GEMMA4_HEAD_DIM_FULL, p->window, GEMMA4_N_VOCAB);
    if (gemma4_is_assistant(p)) {
        /* the targets it can serve: same width, KV heads and window */
        char targets[200] = "";
        for (int i = 0; i < gemma4_profile_count(); i++) {
            const gemma4_profile *t = gemma4_profile_at(i);
            if (gemma4_is_assistant(t) || t->n_embd != p->n_embd_out || t->n_head_kv_swa != p->n_head_kv_swa ||
                t->n_head_kv_full != p->n_head_kv_full || t->window != p->window)
                continue;
            strncat(targets, targets[0] ? ", " : "", sizeof targets - strlen(targets) - 1);
            strncat(targets, t->name, sizeof targets - strlen(targets) - 1);
        }
        printf("drafter:       MTP assistant for targets of width %u (%s): Q-only attention over the target's "
               "caches, own tied head (no soft-cap); pass it with --mtp\n",
               p->n_embd_out, targets[0] ? targets : "none of gem's profiles");
    }
    printf("context:       %" PRId64 " tokens (trained)\n", gemma4_trained_ctx(f, p));
    printf("parameters:    %" PRIu64 " (%.3f B)\n", gemma4_param_count(p), gemma4_param_count(p) / 1e9);
    printf("embedding:     %s\n", quant_type_name(m->token_embd->type));
    if (tk) printf("tokenizer:     %u tokens, bos %d, eos %d\n", tok_n_vocab(tk), tok_bos(tk), tok_eos(tk));
    else printf("tokenizer:     none (a drafter reads the target's ids)\n");
    tok_free(tk);
    uint64_t db = gemma4_decode_bytes(m);
    printf("decode bytes:  %" PRIu64 " per token (%.3f GiB); weight-read roofline on an H200 (4.8 TB/s): %.1f tok/s\n",
           db, db / 1073741824.0, H200_HBM_BYTES_PER_S / (double)db);
    printf("verdict:       OK: supported (%s)\n", p->name);
    const int rc = ctx >= 0 ? print_plan(f, m, path, ctx, kv_type, tile) : 0;
    gemma4_free(m);
    gguf_close(f);
    return rc;
}
