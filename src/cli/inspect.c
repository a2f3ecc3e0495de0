/* gem inspect: what a GGUF file is and whether gem will run it.
 *
 * Prints whatever could be read even for a rejected model (architecture,
 * tensor counts) so the verdict line can be understood; exit status is 0
 * only for a supported model. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/gemma4.h"
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

int cli_inspect(int argc, char **argv) {
    const char *path = NULL;
    int show_keys = 0, show_tensors = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--keys")) show_keys = 1;
        else if (!strcmp(argv[i], "--tensors")) show_tensors = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "gem inspect: error: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "gem inspect: error: more than one file given\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: gem inspect FILE [--keys] [--tensors]\n");
        return 2;
    }
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
    char ctx_key[64];
    snprintf(ctx_key, sizeof ctx_key, "%s.context_length", gemma4_arch(p));
    int64_t ki = gguf_find_key(f, ctx_key);
    int64_t ctx = 0;
    if (ki >= 0) gguf_kv_int(f, (uint64_t)ki, &ctx);
    printf("context:       %" PRId64 " tokens (trained)\n", ctx);
    printf("parameters:    %" PRIu64 " (%.3f B)\n", gemma4_param_count(p), gemma4_param_count(p) / 1e9);
    printf("embedding:     %s\n", quant_type_name(m->token_embd->type));
    if (tk) printf("tokenizer:     %u tokens, bos %d, eos %d\n", tok_n_vocab(tk), tok_bos(tk), tok_eos(tk));
    else printf("tokenizer:     none (a drafter reads the target's ids)\n");
    tok_free(tk);
    uint64_t db = gemma4_decode_bytes(m);
    printf("decode bytes:  %" PRIu64 " per token (%.3f GiB); weight-read roofline on an H200 (4.8 TB/s): %.1f tok/s\n",
           db, db / 1073741824.0, H200_HBM_BYTES_PER_S / (double)db);
    printf("verdict:       OK: supported (%s)\n", p->name);
    gemma4_free(m);
    gguf_close(f);
    return 0;
}
