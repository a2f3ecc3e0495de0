/* Tokenizer keys from Hugging Face files (see hf_tok.h).
 *
 * The reference gets its token list from transformers' fast tokenizer:
 * ids 0..vocab_size-1 from model.vocab, then added tokens beyond the base
 * vocabulary in id order. We rebuild that list from tokenizer.json itself
 * and require it to be dense (every id exactly once), which it is for any
 * tokenizer transformers would load. */
#include "convert/hf_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_BYTE = 6 };

char *hf_read_file(const char *dir, const char *name, int optional, size_t *len, gem_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return file_read(path, optional, len, err);
}

static json *read_json(const char *dir, const char *name, int optional, gem_err *err) {
    size_t n;
    gem_err e2 = {{0}};
    char *s = hf_read_file(dir, name, optional, &n, &e2);
    if (!s) {
        if (e2.msg[0]) gem_err_set(err, "%s", e2.msg);
        return NULL;
    }
    json *j = json_parse(s, n, &e2);
    free(s);
    if (!j) gem_err_set(err, "%s/%s: invalid JSON: %s", dir, name, e2.msg);
    return j;
}

/* A special-token entry of tokenizer_config.json: a string or {"content"}. */
static const json *token_content(const json *e) {
    if (!e) return NULL;
    if (e->type == JSON_STRING) return e;
    if (e->type == JSON_OBJECT) {
        const json *c = json_get(e, "content");
        if (c && c->type == JSON_STRING) return c;
    }
    return NULL;
}

static int is_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return 0;
    }
    return 1;
}

typedef struct {
    const char **text; /* by id, views into the parsed JSON */
    size_t *len;
    int32_t *type;
    uint64_t n;
} vocab;

static int64_t find_id(const vocab *v, const char *s, size_t n) {
    for (uint64_t i = 0; i < v->n; i++)
        if (v->len[i] == n && !memcmp(v->text[i], s, n)) return (int64_t)i;
    return -1;
}

/* The token list: model.vocab by id, then added tokens past it. */
static int build_vocab(const char *dir, const json *tj, vocab *v, gem_err *err) {
    const json *model = json_get(tj, "model");
    const json *mv = model ? json_get(model, "vocab") : NULL;
    if (!mv || mv->type != JSON_OBJECT) return gem_err_set(err, "%s/tokenizer.json: no model.vocab object", dir);
    const json *added = json_get(tj, "added_tokens");
    if (added && added->type != JSON_ARRAY)
        return gem_err_set(err, "%s/tokenizer.json: added_tokens is not an array", dir);
    const uint64_t base = mv->len;
    uint64_t n = base;
    for (size_t i = 0; added && i < added->len; i++) {
        const json *id = json_get(added->items[i], "id");
        if (!id || !id->is_int || id->num < 0) return gem_err_set(err, "%s/tokenizer.json: added_tokens[%zu] has no id", dir, i);
        if ((uint64_t)id->num >= n) n = (uint64_t)id->num + 1;
    }
    if (n > (1u << 24)) return gem_err_set(err, "%s/tokenizer.json: %llu tokens is implausible", dir, (unsigned long long)n);
    v->text = calloc(n ? n : 1, sizeof *v->text);
    v->len = calloc(n ? n : 1, sizeof *v->len);
    v->type = calloc(n ? n : 1, sizeof *v->type);
    v->n = n;
    if (!v->text || !v->len || !v->type) return gem_err_set(err, "out of memory");
    for (size_t i = 0; i < mv->len; i++) {
        const json *id = mv->items[i];
        if (!id->is_int || id->num < 0 || (uint64_t)id->num >= base)
            return gem_err_set(err, "%s/tokenizer.json: token '%s' has id outside 0..%llu", dir, mv->keys[i],
                               (unsigned long long)base - 1);
        uint64_t k = (uint64_t)id->num;
        if (v->text[k]) return gem_err_set(err, "%s/tokenizer.json: id %llu is used twice in model.vocab", dir, (unsigned long long)k);
        v->text[k] = mv->keys[i];
        v->len[k] = mv->key_lens[i];
    }
    for (size_t i = 0; added && i < added->len; i++) {
        const json *a = added->items[i];
        const json *c = json_get(a, "content");
        uint64_t k = (uint64_t)json_get(a, "id")->num;
        if (!c || c->type != JSON_STRING) return gem_err_set(err, "%s/tokenizer.json: added_tokens[%zu] has no content", dir, i);
        if (k < base) continue; /* already in the base vocabulary */
        if (v->text[k]) return gem_err_set(err, "%s/tokenizer.json: added token id %llu is used twice", dir, (unsigned long long)k);
        v->text[k] = c->str;
        v->len[k] = c->len;
        v->type[k] = TT_USER_DEFINED; /* CONTROL if tokenizer_config.json names it special */
    }
    for (uint64_t k = 0; k < n; k++) {
        if (!v->text[k]) return gem_err_set(err, "%s/tokenizer.json: no token has id %llu", dir, (unsigned long long)k);
        if (memchr(v->text[k], 0, v->len[k]))
            return gem_err_set(err, "%s/tokenizer.json: token %llu contains a NUL byte", dir, (unsigned long long)k);
    }
    return 0;
}

static const char *const special_types[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                      "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
                                      "tokenizer.ggml.mask_token_id"};

/* Gemma 4 renders these even though they are special, so the chat parser
 * can read them; the reference marks them USER_DEFINED. */
static const char *const visible_tokens[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                             "<|tool_response>", "<tool_response|>", "<|\"|>"};

/* A special token is CONTROL unless it looks like a byte token (the
 * reference tests the byte pattern first). */
static void mark_special(vocab *v, const json *content) {
    if (!content) return;
    int64_t id = find_id(v, content->str, content->len);
    if (id >= 0 && v->type[id] != TT_BYTE) v->type[id] = TT_CONTROL;
}

int hf_tok_add_keys(gguf_writer *w, const char *dir, const json *config, uint64_t *n_vocab_rows, gem_err *err) {
    json *tj = read_json(dir, "tokenizer.json", 0, err);
    if (!tj) return -1;
    json *tc = NULL, *ctj = NULL;
    char *jinja = NULL, **merges = NULL;
    const char **texts = NULL;
    float *scores = NULL;
    vocab v = {0};
    int rc = -1;
    size_t n_merges = 0;
    const json *model = json_get(tj, "model"), *dec = json_get(tj, "decoder");
    const json *mt = model ? json_get(model, "type") : NULL, *bf = model ? json_get(model, "byte_fallback") : NULL;
    const json *dt = dec ? json_get(dec, "type") : NULL;
    if (!mt || mt->type != JSON_STRING || strcmp(mt->str, "BPE") || !bf || bf->type != JSON_BOOL || !bf->boolean ||
        !dt || dt->type != JSON_STRING || strcmp(dt->str, "Sequence")) {
        gem_err_set(err, "%s/tokenizer.json: not a byte-fallback BPE tokenizer with a Sequence decoder (Gemma 4's kind)", dir);
        goto done;
    }
    const json *pp = json_get(tj, "post_processor");
    if (pp && pp->type != JSON_NULL) {
        /* the reference derives add_bos/add_eos flags from it; Gemma 4 has none */
        gem_err_set(err, "%s/tokenizer.json: a post_processor is not supported (Gemma 4 has none)", dir);
        goto done;
    }
    const json *norm = json_get(tj, "normalizer");
    const json *nt = norm ? json_get(norm, "type") : NULL;
    if (nt && nt->type == JSON_STRING && (!strcmp(nt->str, "Lowercase") || !strcmp(nt->str, "StripAccents") ||
                                          !strcmp(nt->str, "BertNormalizer") || !strcmp(nt->str, "Sequence"))) {
        gem_err_set(err, "%s/tokenizer.json: normalizer '%s' is not supported (Gemma 4 uses Replace)", dir, nt->str);
        goto done;
    }
    if (build_vocab(dir, tj, &v, err)) goto done;
    const json *added = json_get(tj, "added_tokens");
    *n_vocab_rows = json_get(model, "vocab")->len + (added ? added->len : 0);

    gem_err e2 = {{0}};
    tc = read_json(dir, "tokenizer_config.json", 1, &e2);
    if (!tc && e2.msg[0]) {
        gem_err_set(err, "%s", e2.msg);
        goto done;
    }
    /* token types: bytes, then special (named and extra special tokens), then Gemma 4's visible tokens */
    for (uint64_t k = 0; k < v.n; k++) {
        if (v.type[k]) continue; /* an added token past the base vocabulary */
        v.type[k] = is_byte_token(v.text[k], v.len[k]) ? TT_BYTE : TT_NORMAL;
    }
    for (size_t i = 0; tc && i < sizeof special_types / sizeof special_types[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token", special_types[i]);
        mark_special(&v, token_content(json_get(tc, key)));
    }
    for (int li = 0; tc && li < 2; li++) {
        const json *list = json_get(tc, li ? "additional_special_tokens" : "extra_special_tokens");
        if (list && list->type == JSON_ARRAY)
            for (size_t i = 0; i < list->len; i++) mark_special(&v, token_content(list->items[i]));
    }
    for (size_t i = 0; i < sizeof visible_tokens / sizeof visible_tokens[0]; i++) {
        int64_t id = find_id(&v, visible_tokens[i], strlen(visible_tokens[i]));
        if (id >= 0) v.type[id] = TT_USER_DEFINED;
    }

    /* merges: strings verbatim, pairs joined by a space (spaces inside a
     * part become U+0120, as the reference encodes them) */
    const json *mj = json_get(model, "merges");
    if (mj && mj->type == JSON_ARRAY && mj->len) {
        n_merges = mj->len;
        merges = calloc(n_merges, sizeof *merges);
        if (!merges) {
            gem_err_set(err, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < n_merges; i++) {
            const json *m = mj->items[i];
            if (m->type == JSON_STRING && mj->items[0]->type == JSON_STRING) {
                merges[i] = strdup(m->str);
            } else if (m->type == JSON_ARRAY && m->len == 2 && m->items[0]->type == JSON_STRING &&
                       m->items[1]->type == JSON_STRING && mj->items[0]->type == JSON_ARRAY) {
                strbuf sb = {0};
                for (int part = 0; part < 2; part++) {
                    if (part) sb_putc(&sb, ' ');
                    const json *s = m->items[part];
                    for (size_t c = 0; c < s->len; c++) {
                        if (s->str[c] == ' ') sb_puts(&sb, "\xc4\xa0");
                        else sb_putc(&sb, s->str[c]);
                    }
                }
                merges[i] = sb.failed ? NULL : strdup(sb_cstr(&sb));
                sb_free(&sb);
            } else {
                gem_err_set(err, "%s/tokenizer.json: merges[%zu] has an unknown format", dir, i);
                goto done;
            }
            if (!merges[i]) {
                gem_err_set(err, "out of memory");
                goto done;
            }
        }
    }

    texts = malloc((v.n ? v.n : 1) * sizeof *texts);
    scores = malloc((v.n ? v.n : 1) * sizeof *scores);
    if (!texts || !scores) {
        gem_err_set(err, "out of memory");
        goto done;
    }
    for (uint64_t k = 0; k < v.n; k++) {
        texts[k] = v.text[k]; /* JSON strings are NUL-terminated and hold no NUL (checked) */
        scores[k] = -1000.0f;
    }
    if (gguf_w_str(w, "tokenizer.ggml.model", "gemma4", err) ||
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", texts, v.n, err) ||
        gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, v.n, err) ||
        gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, v.type, v.n, err))
        goto done;
    if (n_merges && gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, n_merges, err)) goto done;

    /* special ids: tokenizer_config.json names a content, looked up in
     * added_tokens (first match); then config.json's integer *_token_id for
     * the types still unset. Written in that order of discovery. */
    int64_t ids[7];
    int from_tc[7];
    const json *text_cfg = json_get(config, "text_config");
    for (int i = 0; i < 7; i++) {
        char key[32];
        ids[i] = -1;
        from_tc[i] = 0;
        snprintf(key, sizeof key, "%s_token", special_types[i]);
        const json *c = tc ? token_content(json_get(tc, key)) : NULL;
        for (size_t k = 0; c && added && k < added->len && ids[i] < 0; k++) {
            const json *ac = json_get(added->items[k], "content");
            if (ac && ac->type == JSON_STRING && ac->len == c->len && !memcmp(ac->str, c->str, c->len)) {
                ids[i] = (int64_t)json_get(added->items[k], "id")->num;
                from_tc[i] = 1;
            }
        }
    }
    for (int i = 0; i < 7; i++) {
        if (ids[i] >= 0) continue;
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", special_types[i]);
        const json *x = json_get(config, key);
        if ((!x || x->type == JSON_NULL) && text_cfg) x = json_get(text_cfg, key);
        if (x && x->type == JSON_NUMBER && x->is_int) {
            if (x->num < 0 || x->num > UINT32_MAX) {
                gem_err_set(err, "%s/config.json: %s %.0f is out of range", dir, key, x->num);
                goto done;
            }
            ids[i] = (int64_t)x->num;
        }
    }
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < 7; i++)
            if (ids[i] >= 0 && from_tc[i] == pass && gguf_w_u32(w, id_keys[i], (uint32_t)ids[i], err)) goto done;
    /* add_<type>_token flags the writer knows (bos, eos, sep) */
    int have_add_bos = 0;
    for (int i = 0; tc && i < 7; i++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", special_types[i]);
        const json *b = json_get(tc, key);
        if (!b || b->type != JSON_BOOL || (i != 0 && i != 1 && i != 3)) continue;
        char gk[64];
        snprintf(gk, sizeof gk, "tokenizer.ggml.add_%s_token", special_types[i]);
        /* the reference later sets add_bos_token to true in place */
        if (gguf_w_bool(w, gk, i == 0 ? 1 : b->boolean, err)) goto done;
        have_add_bos |= i == 0;
    }
    const json *ct = tc ? json_get(tc, "chat_template") : NULL;
    if (ct && ct->type != JSON_STRING && ct->type != JSON_NULL) {
        gem_err_set(err, "%s/tokenizer_config.json: chat_template lists are not supported", dir);
        goto done;
    }
    if (tc && (!ct || ct->type == JSON_NULL)) {
        size_t n;
        e2.msg[0] = 0;
        jinja = hf_read_file(dir, "chat_template.jinja", 1, &n, &e2);
        if (!jinja && e2.msg[0]) {
            gem_err_set(err, "%s", e2.msg);
            goto done;
        }
        if (!jinja) {
            ctj = read_json(dir, "chat_template.json", 1, &e2);
            if (!ctj && e2.msg[0]) {
                gem_err_set(err, "%s", e2.msg);
                goto done;
            }
            const json *c = ctj ? json_get(ctj, "chat_template") : NULL;
            if (c && c->type == JSON_STRING) ct = c;
        } else if (memchr(jinja, 0, n)) {
            gem_err_set(err, "%s/chat_template.jinja contains a NUL byte", dir);
            goto done;
        }
    }
    if (jinja) {
        if (gguf_w_str(w, "tokenizer.chat_template", jinja, err)) goto done;
    } else if (ct && ct->type == JSON_STRING) {
        if (memchr(ct->str, 0, ct->len)) {
            gem_err_set(err, "%s: chat template contains a NUL byte", dir);
            goto done;
        }
        if (gguf_w_str(w, "tokenizer.chat_template", ct->str, err)) goto done;
    }
    if (gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", 0, err)) goto done;
    if (!have_add_bos && gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1, err)) goto done;
    rc = 0;
done:
    for (size_t i = 0; merges && i < n_merges; i++) free(merges[i]);
    free(merges);
    free(texts);
    free(scores);
    free(v.text);
    free(v.len);
    free(v.type);
    free(jinja);
    json_free(ctj);
    json_free(tc);
    json_free(tj);
    return rc;
}
