/* Tokenizer loading, special-token partition and streaming decode, shared
 * by every tokenizer model (see tok.h; tok_int.h names the model files).
 *
 * Tables: token text -> id and (left id, right id) -> (merge rank, merged
 * id) are open-addressing hash tables built once at load. Token attributes,
 * the end-of-generation set and the special-token list follow the
 * reference's loader, whatever the model: its heuristics key on token
 * texts, so they carry over to any vocabulary. */
#include "tok/tok.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"
#include "util/hash.h"

/* ---- hashing ---- */

/* Seeded per vocabulary (util/hash.h): texts and merge pairs come from
 * the file, and a fixed hash lets its author pick keys that share slots. */
static uint64_t hash_bytes(const tok *t, const char *p, size_t n) { return hash_bytes_seeded(p, n, t->seed); }
static uint64_t hash_pair(const tok *t, uint64_t k) { return hash_mix64(k ^ t->seed); }

int32_t tok_find(const tok *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(t, s, n) & t->text_mask;
    for (;;) {
        uint32_t id = t->text_index[h];
        if (id == TOK_EMPTY_SLOT) return -1;
        if (t->text[id].len == n && !memcmp(t->text[id].ptr, s, n)) return (int32_t)id;
        h = (h + 1) & t->text_mask;
    }
}

const tok_merge_slot *tok_merge_find(const tok *t, int32_t l, int32_t r) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint64_t h = hash_pair(t, key) & t->merge_mask;
    for (;;) {
        const tok_merge_slot *s = &t->merges[h];
        if (s->rank < 0) return NULL;
        if (s->key == key) return s;
        h = (h + 1) & t->merge_mask;
    }
}

/* ---- loading ---- */

static int64_t key_index(const gguf_file *f, const char *key) { return gguf_find_key(f, key); }

static int load_id(const gguf_file *f, const char *key, uint32_t n_vocab, int32_t *out, gem_err *err) {
    int64_t i = key_index(f, key);
    if (i < 0) return 0; /* keep the default */
    int64_t v;
    if (gguf_kv_int(f, (uint64_t)i, &v)) return gem_err_set(err, "%s: key '%s' is not an integer", gguf_path(f), key);
    if (v < 0 || v >= n_vocab) return gem_err_set(err, "%s: key '%s' = %lld is out of the vocabulary", gguf_path(f), key, (long long)v);
    *out = (int32_t)v;
    return 0;
}

static int load_bool(const gguf_file *f, const char *key, int *out, gem_err *err) {
    int64_t i = key_index(f, key);
    if (i < 0) return 0;
    if (gguf_kv_bool(f, (uint64_t)i, out)) return gem_err_set(err, "%s: key '%s' is not a bool", gguf_path(f), key);
    return 0;
}

/* End-of-generation texts the reference recognises (its list); they also
 * become control. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};

/* Fill-in-the-middle tokens by kind (prefix, suffix, middle, pad, repo,
 * file separator): their keys and the texts the reference looks for when a
 * key is absent. The last three end generation. */
enum { FIM_PRE, FIM_SUF, FIM_MID, FIM_PAD, FIM_REP, FIM_SEP, FIM_KINDS };
static const char *const fim_keys[FIM_KINDS] = {
    "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
};
static const char *const fim_old_keys[FIM_KINDS] = {
    "tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id", NULL, NULL, NULL,
};
static const char *const fim_texts[FIM_KINDS][9] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"},
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
    {"<|file_sep|>"},
};

/* The lowest id among the texts of a NULL-terminated list, or -1 (the
 * reference takes whichever its hash map yields first; vocabularies hold
 * at most one of each list). */
static int32_t first_text(const tok *t, const char *const *texts) {
    int32_t best = -1;
    for (size_t i = 0; i < 9 && texts[i]; i++) {
        int32_t id = tok_find(t, texts[i], strlen(texts[i]));
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
}

static int build_attrs(tok *t, const gguf_file *f, gem_err *err) {
    int32_t fim[FIM_KINDS];
    int64_t ki = key_index(f, "tokenizer.ggml.token_type");
    for (uint32_t i = 0; i < t->n_vocab; i++) t->attr[i] = TOK_ATTR_NORMAL;
    if (ki >= 0) {
        if (gguf_kv_arr_len(f, (uint64_t)ki) != t->n_vocab)
            return gem_err_set(err, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", gguf_path(f),
                               (unsigned long long)gguf_kv_arr_len(f, (uint64_t)ki), t->n_vocab);
        for (uint32_t i = 0; i < t->n_vocab; i++) {
            int64_t ty;
            if (gguf_kv_arr_int(f, (uint64_t)ki, i, &ty))
                return gem_err_set(err, "%s: tokenizer.ggml.token_type is not an integer array", gguf_path(f));
            switch (ty) {
            case 2: t->attr[i] = TOK_ATTR_UNKNOWN; break;
            case 3: t->attr[i] = TOK_ATTR_CONTROL; break;
            case 4: t->attr[i] = TOK_ATTR_USER_DEFINED; break;
            case 5: t->attr[i] = TOK_ATTR_UNUSED; break;
            case 6: t->attr[i] = TOK_ATTR_BYTE; break;
            default: t->attr[i] = TOK_ATTR_NORMAL; break;
            }
            /* a byte token stands for the one byte its text <0xHH> names
             * (build_pieces writes that byte whatever the text's length) */
            const gguf_str *s = &t->text[i];
            if (ty == 6 && (s->len != 6 || memcmp(s->ptr, "<0x", 3) || s->ptr[5] != '>' || !isxdigit((unsigned char)s->ptr[3]) ||
                            !isxdigit((unsigned char)s->ptr[4])))
                return gem_err_set(err, "%s: token %u is a byte token (type 6) but its text is not <0xHH>", gguf_path(f),
                                   i);
        }
    }
    /* fill-in-the-middle tokens: named by a key, or else found by text (and
     * then made control, as the reference does) */
    for (int k = 0; k < FIM_KINDS; k++) {
        int32_t id = -1;
        if (load_id(f, fim_keys[k], t->n_vocab, &id, err)) return -1;
        if (id < 0 && fim_old_keys[k] && load_id(f, fim_old_keys[k], t->n_vocab, &id, err)) return -1;
        if (id < 0) {
            id = first_text(t, fim_texts[k]);
            if (id >= 0) t->attr[id] |= TOK_ATTR_CONTROL;
        }
        fim[k] = id;
    }
    /* control tokens named "unused" are unused too */
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->attr[i] & TOK_ATTR_CONTROL)) continue;
        const gguf_str *s = &t->text[i];
        for (uint64_t k = 0; k + 6 <= s->len; k++)
            if (!memcmp(s->ptr + k, "unused", 6)) { t->attr[i] |= TOK_ATTR_UNUSED; break; }
    }
    int32_t tool_response = -1, eos_s = -1;
    for (size_t e = 0; e < sizeof eog_texts / sizeof eog_texts[0]; e++) {
        int32_t id = tok_find(t, eog_texts[e], strlen(eog_texts[e]));
        if (id < 0) continue;
        t->eog[id] = 1;
        t->attr[id] |= TOK_ATTR_CONTROL;
        if (!strcmp(eog_texts[e], "<|tool_response>")) tool_response = id;
        if (!strcmp(eog_texts[e], "</s>")) eos_s = id;
    }
    /* As the reference: with <|tool_response> in the end set, "</s>" is an
     * ordinary token again. */
    if (tool_response >= 0 && eos_s >= 0) {
        t->eog[eos_s] = 0;
        t->attr[eos_s] = TOK_ATTR_NORMAL;
    }
    for (int k = FIM_PAD; k <= FIM_SEP; k++)
        if (fim[k] >= 0) t->eog[fim[k]] = 1;
    int32_t eot = -1, eom = -1;
    if (load_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot, err) ||
        load_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom, err))
        return -1;
    if (eot >= 0) t->eog[eot] = 1;
    if (eom >= 0) t->eog[eom] = 1;
    if (t->eos >= 0) t->eog[t->eos] = 1;
    return 0;
}

/* Specials are matched longest first, ties by id (a total order: a file
 * may mark every token special, so the sort must not be quadratic). */
typedef struct {
    uint64_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_specials(tok *t) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN) && t->text[i].len) n++;
    t->specials = malloc((n ? n : 1) * sizeof *t->specials);
    if (!t->specials) return -1;
    special_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return -1;
    t->n_specials = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN) && t->text[i].len)
            keys[t->n_specials++] = (special_key){t->text[i].len, (int32_t)i};
    qsort(keys, n, sizeof *keys, cmp_special);
    for (uint32_t i = 0; i < n; i++) t->specials[i] = keys[i].id;
    free(keys);
    return 0;
}

/* Every token's piece (tok_piece), rendered once: special texts as they
 * are, a byte token as its byte, a NORMAL text as its model spells bytes. */
static int build_pieces(tok *t) {
    strbuf b = {0};
    t->piece_off = malloc((t->n_vocab + 1ull) * sizeof *t->piece_off);
    if (!t->piece_off) return -1;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = b.len;
        const gguf_str *s = &t->text[i];
        uint8_t a = t->attr[i];
        if (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN | TOK_ATTR_USER_DEFINED)) {
            sb_put(&b, s->ptr, s->len);
        } else if (a & TOK_ATTR_NORMAL) {
            if (t->model == TOK_MODEL_SPM) tok_spm_normal_piece(s->ptr, s->len, &b);
            else tok_bbpe_normal_piece(s->ptr, s->len, &b);
        } else if (a & TOK_ATTR_BYTE) {
            unsigned v = 0;
            for (uint64_t k = 3; k < 5 && k < s->len; k++) {
                char c = s->ptr[k];
                v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0);
            }
            sb_putc(&b, (char)v);
        }
    }
    t->piece_off[t->n_vocab] = b.len;
    sb_cstr(&b);
    if (b.failed) {
        sb_free(&b);
        return -1;
    }
    t->pieces = b.p;
    return 0;
}

static int build_merges(tok *t, const gguf_file *f, gem_err *err) {
    int64_t ki = key_index(f, "tokenizer.ggml.merges");
    uint64_t n = ki >= 0 ? gguf_kv_arr_len(f, (uint64_t)ki) : 0;
    if (ki >= 0 && gguf_kv_arr_type(f, (uint64_t)ki) != GGUF_T_STRING)
        return gem_err_set(err, "%s: tokenizer.ggml.merges is not a string array", gguf_path(f));
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return gem_err_set(err, "out of memory");
    for (uint64_t i = 0; i < cap; i++) t->merges[i].rank = -1;
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n && i < INT32_MAX; i++) {
        gguf_str m;
        gguf_kv_arr_str(f, (uint64_t)ki, i, &m);
        /* the reference splits at the first space after the first byte */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) { t->n_unresolved++; continue; }
        size_t ln = (size_t)(sp - m.ptr), rn = m.len - ln - 1;
        int32_t l = tok_find(t, m.ptr, ln), r = tok_find(t, sp + 1, rn);
        if (l < 0 || r < 0) { t->n_unresolved++; continue; }
        if (ln + rn > buf_cap) {
            buf_cap = (ln + rn) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { free(buf); return gem_err_set(err, "out of memory"); }
            buf = nb;
        }
        memcpy(buf, m.ptr, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t merged = tok_find(t, buf, ln + rn);
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        uint64_t h = hash_pair(t, key) & t->merge_mask;
        while (t->merges[h].rank >= 0 && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
        if (t->merges[h].rank >= 0) continue; /* first rank wins, as in the reference */
        t->merges[h] = (tok_merge_slot){key, (int32_t)i, merged};
        t->n_merges++;
    }
    free(buf);
    return 0;
}

tok *tok_load(const gguf_file *f, gem_err *err) {
    int64_t ki = key_index(f, "tokenizer.ggml.model");
    gguf_str model;
    if (ki < 0 || gguf_kv_str(f, (uint64_t)ki, &model)) {
        gem_err_set(err, "%s: no tokenizer (missing tokenizer.ggml.model)", gguf_path(f));
        return NULL;
    }
    tok_model kind;
    pretok_kind pre = PRETOK_QWEN35;
    if (gguf_str_eq(model, "gemma4")) {
        kind = TOK_MODEL_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        kind = TOK_MODEL_BBPE;
        gguf_str pname = {"", 0};
        int64_t pi = key_index(f, "tokenizer.ggml.pre");
        if (pi >= 0 && gguf_kv_str(f, (uint64_t)pi, &pname)) pname.len = 0;
        if (pretok_from_name(pname.ptr, pname.len, &pre)) {
            gem_err_set(err, "%s: pre-tokenizer '%.*s' is not supported (gem supports qwen35)", gguf_path(f),
                        (int)(pname.len > 40 ? 40 : pname.len), pname.ptr);
            return NULL;
        }
        if (key_index(f, "tokenizer.ggml.merges") < 0) {
            gem_err_set(err, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges", gguf_path(f));
            return NULL;
        }
    } else {
        gem_err_set(err, "%s: tokenizer model '%.*s' is not supported (gem supports gemma4 and gpt2)", gguf_path(f),
                    (int)(model.len > 40 ? 40 : model.len), model.ptr);
        return NULL;
    }
    ki = key_index(f, "tokenizer.ggml.tokens");
    if (ki < 0 || gguf_kv_arr_type(f, (uint64_t)ki) != GGUF_T_STRING || gguf_kv_arr_len(f, (uint64_t)ki) == 0 ||
        gguf_kv_arr_len(f, (uint64_t)ki) >= INT32_MAX) {
        gem_err_set(err, "%s: tokenizer.ggml.tokens is missing or not a non-empty string array", gguf_path(f));
        return NULL;
    }
    tok *t = calloc(1, sizeof *t);
    if (!t) {
        gem_err_set(err, "out of memory");
        return NULL;
    }
    t->model = kind;
    t->pre = pre;
    t->seed = hash_seed(t);
    t->n_vocab = (uint32_t)gguf_kv_arr_len(f, (uint64_t)ki);
    t->text = malloc(t->n_vocab * sizeof *t->text);
    t->attr = malloc(t->n_vocab);
    t->eog = calloc(t->n_vocab, 1);
    uint64_t cap = 16;
    while (cap < (uint64_t)t->n_vocab * 2) cap <<= 1;
    t->text_index = malloc(cap * sizeof *t->text_index);
    t->text_mask = cap - 1;
    if (!t->text || !t->attr || !t->eog || !t->text_index) goto oom;
    memset(t->text_index, 0xff, cap * sizeof *t->text_index);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        gguf_kv_arr_str(f, (uint64_t)ki, i, &t->text[i]);
        uint32_t cps = 0, cp;
        for (size_t k = 0; k < t->text[i].len; cps++)
            k += tok_decode_lenient((const unsigned char *)t->text[i].ptr + k, t->text[i].len - k, &cp);
        if (cps > t->max_cps) t->max_cps = cps;
        /* later duplicates win, as in the reference's text -> id map */
        uint64_t h = hash_bytes(t, t->text[i].ptr, t->text[i].len) & t->text_mask;
        for (;;) {
            uint32_t id = t->text_index[h];
            if (id == TOK_EMPTY_SLOT) { t->text_index[h] = i; break; }
            if (t->text[id].len == t->text[i].len && !memcmp(t->text[id].ptr, t->text[i].ptr, t->text[i].len)) {
                t->text_index[h] = i;
                break;
            }
            h = (h + 1) & t->text_mask;
        }
    }
    /* the reference's defaults per model, before the file's keys */
    if (kind == TOK_MODEL_SPM) {
        t->bos = 2;
        t->eos = 1;
        t->add_bos = 1;
    } else {
        t->bos = t->eos = 11;
        t->add_bos = 0;
    }
    if (load_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, err) ||
        load_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, err) ||
        load_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err) ||
        load_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos, err))
        goto fail;
    if (kind == TOK_MODEL_SPM) t->add_bos = 1; /* forced for Gemma 4, as the reference does */
    if (t->bos >= (int32_t)t->n_vocab) t->bos = -1;
    if (t->eos >= (int32_t)t->n_vocab) t->eos = -1;
    if (build_attrs(t, f, err) || build_merges(t, f, err)) goto fail;
    if (build_specials(t) || build_pieces(t)) goto oom;
    for (int b = 0; b < 256; b++) {
        char name[8];
        static const char hex[] = "0123456789ABCDEF";
        name[0] = '<'; name[1] = '0'; name[2] = 'x'; name[3] = hex[b >> 4]; name[4] = hex[b & 15]; name[5] = '>';
        t->byte_id[b] = tok_find(t, name, 6);
    }
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->ascii_id[c] = tok_find(t, &ch, 1);
    }
    if (kind == TOK_MODEL_BBPE) tok_bbpe_init(t);
    return t;
oom:
    gem_err_set(err, "out of memory loading the tokenizer");
fail:
    tok_free(t);
    return NULL;
}

void tok_free(tok *t) {
    if (!t) return;
    free(t->text);
    free(t->attr);
    free(t->eog);
    free(t->text_index);
    free(t->merges);
    free(t->specials);
    free(t->pieces);
    free(t->piece_off);
    free(t);
}

uint32_t tok_n_vocab(const tok *t) { return t->n_vocab; }
int32_t tok_bos(const tok *t) { return t->bos; }
int32_t tok_eos(const tok *t) { return t->eos; }
int tok_add_bos(const tok *t) { return t->add_bos; }
int tok_is_eog(const tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab && t->eog[id]; }
uint32_t tok_attr(const tok *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_vocab ? t->attr[id] : 0; }

const char *tok_text(const tok *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    *len = t->text[id].len;
    return t->text[id].ptr;
}

const char *tok_piece(const tok *t, int32_t id, int special, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (!special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) {
        *len = 0;
        return "";
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->pieces + t->piece_off[id];
}

/* ---- encoding ---- */

int tok_ids_push(tok_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t c = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, c * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = c;
    }
    o->v[o->n++] = id;
    return 0;
}

void tok_ids_free(tok_ids *ids) {
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

typedef struct {
    size_t off, len;
    int32_t id; /* -1: raw text */
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, size_t off, size_t len, int32_t id) {
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 16;
        fragment *v = realloc(l->v, c * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = (fragment){off, len, id};
    return 0;
}

/* Each model maps the input to symbols a token text spells, one code point
 * of its text per code point (SPM: a space to U+2581, an invalid byte to
 * U+FFFD) or per byte (BBPE) of the input, a special token's text to
 * itself; fallbacks cover less. So a token covers at most max_cps code
 * points, or bytes, of the input. Every code point but a stray
 * continuation byte's holds exactly one byte outside 0x80-0xBF, so those
 * bytes count code points, and bytes, from below. */
size_t tok_min_tokens(const tok *t, const char *text, size_t len) {
    size_t cps = 0;
    for (size_t i = 0; i < len; i++) cps += ((unsigned char)text[i] & 0xc0) != 0x80;
    return t->max_cps ? (cps + t->max_cps - 1) / t->max_cps : 0;
}

int tok_encode(const tok *t, const char *text, size_t len, int add_bos, int parse_special, tok_ids *out) {
    if (add_bos && t->add_bos && t->bos >= 0 && tok_ids_push(out, t->bos)) return -1;
    if (len == 0) return 0;
    frag_list cur = {0}, next = {0};
    int rc = frag_push(&cur, 0, len, -1);
    /* Split out special tokens, longest text first, each over every raw
     * fragment left to right: the reference's partition order. */
    for (uint32_t k = 0; k < t->n_specials && !rc; k++) {
        int32_t sid = t->specials[k];
        if (!parse_special && (t->attr[sid] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        const gguf_str *st = &t->text[sid];
        next.n = 0;
        for (size_t f = 0; f < cur.n && !rc; f++) {
            fragment fr = cur.v[f];
            if (fr.id >= 0) { rc = frag_push(&next, fr.off, fr.len, fr.id); continue; }
            size_t at = fr.off, end = fr.off + fr.len;
            while (!rc) {
                const char *hit = end - at >= st->len ? memmem(text + at, end - at, st->ptr, st->len) : NULL;
                if (!hit) {
                    if (end > at) rc = frag_push(&next, at, end - at, -1);
                    break;
                }
                size_t h = (size_t)(hit - text);
                if (h > at) rc = frag_push(&next, at, h - at, -1);
                if (!rc) rc = frag_push(&next, h, st->len, sid);
                at = h + st->len;
            }
        }
        frag_list tmp = cur;
        cur = next;
        next = tmp;
    }
    bpe_scratch s = {0};
    for (size_t f = 0; f < cur.n && !rc; f++) {
        if (cur.v[f].id >= 0) rc = tok_ids_push(out, cur.v[f].id);
        else if (t->model == TOK_MODEL_SPM) rc = tok_spm_encode(t, text + cur.v[f].off, cur.v[f].len, &s, out);
        else rc = tok_bbpe_encode(t, text + cur.v[f].off, cur.v[f].len, &s, out);
    }
    if (!rc && add_bos && t->add_eos && t->eos >= 0) rc = tok_ids_push(out, t->eos);
    bpe_scratch_free(&s);
    free(cur.v);
    free(next.v);
    return rc ? -1 : 0;
}

/* ---- streaming decode ---- */

/* Bytes a lead byte announces (0 for a byte that cannot start a character). */
static int utf8_need(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

void tok_stream_feed(tok_stream *s, const char *p, size_t n, tok_emit_fn emit, void *ctx) {
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    /* complete a pending character first */
    while (s->n && i < n) {
        int need = utf8_need(s->pend[0]);
        if ((u[i] & 0xc0) != 0x80) { /* cannot continue: release what is held */
            emit((const char *)s->pend, (size_t)s->n, ctx);
            s->n = 0;
            break;
        }
        s->pend[s->n++] = u[i++];
        if (s->n == need) {
            emit((const char *)s->pend, (size_t)s->n, ctx);
            s->n = 0;
        }
    }
    if (i == n) return;
    /* emit everything up to a possibly incomplete character at the end */
    size_t end = n, k = n;
    int back = 0;
    while (k > i && back < 3 && (u[k - 1] & 0xc0) == 0x80) { k--; back++; }
    if (k > i) {
        int need = utf8_need(u[k - 1]);
        size_t have = n - (k - 1);
        if (need > 1 && have < (size_t)need) end = k - 1;
    }
    if (end > i) emit(p + i, end - i, ctx);
    for (size_t j = end; j < n; j++) s->pend[s->n++] = u[j];
}

void tok_stream_flush(tok_stream *s, tok_emit_fn emit, void *ctx) {
    if (s->n) emit((const char *)s->pend, (size_t)s->n, ctx);
    s->n = 0;
}
