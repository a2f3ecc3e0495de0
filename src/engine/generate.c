/* The one generation loop (engine.h: gem_session_sync, gem_session_generate).
 *
 * Prefix policy. A session holds the tokens it evaluated and, apart from
 * them, one checkpoint: the exact state at the last turn start (the
 * model's turn marker: <|turn>, <|im_start|>) of
 * the last generated prompt, or at that prompt's end when it has none. A
 * new prompt continues the live state when it begins with everything the
 * session holds, or from the longest common prefix when the live state can
 * be rewound there exactly (model_rewind_min: Gemma's sliding rings keep a
 * few positions beyond the window, a recurrent state rewinds nowhere; a
 * chat's next turn usually re-renders the answer with its last whitespace
 * trimmed); else from the checkpoint, which
 * a thinking answer needs (it is re-rendered without its thought channel,
 * but the next turn repeats everything before its generation prompt,
 * which is where the checkpoint stands); whichever keeps more.
 *
 * Ordering. Prompt tiles are the backend's (poll runs between them, never
 * by cutting them smaller); a tile ends at the checkpoint's position so the
 * state stands exactly there once. Only the prompt's last tile, and one
 * ending at the checkpoint (whose logits it keeps), compute the head. A
 * checkpoint at the prompt's end is taken once the first token has gone
 * through the callbacks (poll sends a stream's chunk): the first token
 * never waits for it, and on a GPU it is a copy enqueued before the next
 * step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/spec_policy.h"
#include "engine/stop.h"
#include "util/clock.h"

gem_gen_params gem_gen_params_default(void) {
    gem_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = gem_sampling_default();
    p.max_tokens = -1;
    p.draft_max = GEM_DRAFT_MAX_DEFAULT;
    p.draft_p_prod = GEM_DRAFT_P_PROD_DEFAULT;
    return p;
}

static int is_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na <= nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

size_t keep_plan(const keep_src *k, const int32_t *ids, size_t n, keep_how *how) {
    /* a state that holds the whole prompt must hold the logits after it */
    const size_t have = k->n;
    const gem_checkpoint *c = k->ck;
    const int live = have && is_prefix(k->t, have, ids, n) && (have < n || k->next_ok);
    const int ck = c && c->n_tokens && is_prefix(c->tokens, c->n_tokens, ids, n) && (c->n_tokens < n || c->next_ok);
    /* else the live state rewound to where the prompt leaves it (a chat's
     * re-rendered answer often differs from the generated one only in its
     * last tokens: whitespace the template trims), where its rings still
     * hold that point exactly; one token before the prompt's end at most,
     * so the logits after it are computed */
    size_t back = 0;
    if (!live && have) {
        size_t l = 0;
        while (l < have && l < n && k->t[l] == ids[l]) l++;
        if (l == n) l = n - 1;
        if (l > 0 && l >= (size_t)(k->rewind_min > 0 ? k->rewind_min : 0)) back = l;
    }
    if (live && (!ck || have >= c->n_tokens)) {
        *how = KEEP_LIVE;
        return have;
    }
    if (back && (!ck || back >= c->n_tokens)) {
        *how = KEEP_REWIND;
        return back;
    }
    if (ck) {
        *how = KEEP_CK;
        return c->n_tokens;
    }
    *how = KEEP_NONE;
    return 0;
}

/* The session as keep_plan sees it. */
static keep_src session_src(const gem_session *s) {
    keep_src k = {s->tokens, s->n_tokens, s->logits_dev || s->logits_valid, model_rewind_min(s->st), s->ck};
    return k;
}

long gem_session_keeps(const gem_session *s, const int32_t *ids, size_t n) {
    if (n == 0) return 0;
    keep_how how;
    const keep_src k = session_src(s);
    return (long)keep_plan(&k, ids, n, &how);
}

long gem_session_sync(gem_session *s, const int32_t *ids, size_t n, gem_err *err) {
    s->synced = 0;
    if (n == 0) return gem_err_set(err, "empty prompt");
    if (n > (size_t)s->e->n_ctx)
        return gem_err_set(err, "the prompt (%zu tokens) exceeds the context of %d", n, s->e->n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->e->n_vocab)
            return gem_err_set(err, "token id %d at prompt position %zu is out of the vocabulary", ids[i], i);
    if (n > s->prompt_cap) {
        int32_t *p = realloc(s->prompt, n * sizeof *p);
        if (!p) return gem_err_set(err, "out of memory");
        s->prompt = p;
        s->prompt_cap = n;
    }
    memcpy(s->prompt, ids, n * sizeof *ids);
    s->n_prompt = n;
    keep_how how;
    const keep_src k = session_src(s);
    const size_t keep = keep_plan(&k, ids, n, &how);
    if (how == KEEP_REWIND) {
        model_rewind(s->st, (int)keep);
        s->n_tokens = keep;
        s->logits_valid = s->logits_dev = 0;
    } else if (how == KEEP_CK) {
        gem_session_restore(s, s->ck);
    } else if (how == KEEP_NONE) {
        session_clear(s);
    }
    s->n_kept = keep;
    s->synced = 1;
    return (long)s->n_kept;
}

/* Keeps the session's state as the turn checkpoint, unless the checkpoint
 * already holds these tokens. Without room for it, generation goes on
 * without one (reuse is an optimisation, not a result). */
static void keep_checkpoint(gem_session *s) {
    gem_checkpoint *c = s->ck;
    if (c && c->n_tokens == s->n_tokens && is_prefix(c->tokens, c->n_tokens, s->tokens, s->n_tokens)) return;
    gem_err err;
    if (!c && !(c = s->ck = calloc(1, sizeof *c))) return;
    if (checkpoint_fill(s, c, &err)) {
        gem_checkpoint_free(c);
        s->ck = NULL;
    }
}

/* Text between the detokenizer, the stop strings and on_text. */
typedef struct {
    const gem_gen_callbacks *cb;
    stopper st;
    int stop; /* on_text asked to stop */
} text_sink;

static void to_caller(const char *p, size_t n, void *ctx) {
    text_sink *t = ctx;
    if (n && t->cb->on_text && t->cb->on_text(t->cb->ctx, p, n)) t->stop = 1;
}

/* A grammar-constrained generation's matcher and scratch. */
#define GEN_FEW_ALLOWED 4096 /* allowed tokens below which a plain argmax scans them, not a masked copy */
typedef struct {
    gram_state *st;
    const gram_vocab *gv;
    uint32_t *bits; /* the mask */
    float *masked;  /* the logits under it */
    /* closing: once the shortest completion needs every token the answer
     * may still take, the answer is that completion (a structured answer
     * cut by max_tokens would not parse) */
    strbuf cbytes;
    tok_ids close, probe_ids;
    size_t close_at;
    int closing;
    gram_state *probe; /* a drawn token's state, to check its completion still fits */
} constraint;

/* Tokens before the length limit at which a constrained answer starts
 * checking whether it must close (a completion needs at most one token per
 * byte; past this it is computed every step). */
#define GEN_CLOSE_LOOK 512

/* 1 when the answer, with left tokens to go, must now become the grammar's
 * shortest completion (c->close), 0 when it may go on, -1 out of memory. */
static int must_close(const gem_engine *e, constraint *c, long left) {
    if (left > GEN_CLOSE_LOOK) return 0;
    c->cbytes.len = 0;
    if (gram_state_complete(c->st, &c->cbytes)) return c->cbytes.failed ? -1 : 0; /* none: the limit cuts it */
    if (!c->cbytes.len) return 0;
    if (left > (long)c->cbytes.len) return 0; /* even one byte per token fits */
    c->close.n = 0;
    /* special tokens parsed: the completion's markers (<|"|>, <tool_call|>) are single tokens */
    if (tok_encode(e->tok, c->cbytes.p, c->cbytes.len, 0, 1, &c->close)) return -1;
    return (long)c->close.n >= left;
}

/* 1 when a drawn token leaves a completion that fits the left tokens after
 * it: one that opens more (a second tool call, a nested object) near the
 * limit would otherwise overrun it; 0 when it does not fit, -1 out of
 * memory. A token the grammar refuses is left to its caller's check. */
static int fits_after(const gem_engine *e, constraint *c, int32_t id, long left) {
    if (tok_is_eog(e->tok, id)) return 1;
    if (!c->probe && !(c->probe = gram_state_clone(c->st))) return -1;
    if (gram_state_copy(c->probe, c->st)) return -1;
    if (gram_accept_token(c->probe, c->gv, id)) return 1;
    c->cbytes.len = 0;
    if (gram_state_complete(c->probe, &c->cbytes)) return c->cbytes.failed ? -1 : 1;
    if ((long)c->cbytes.len <= left) return 1;
    c->probe_ids.n = 0;
    if (tok_encode(e->tok, c->cbytes.p, c->cbytes.len, 0, 1, &c->probe_ids)) return -1;
    return (long)c->probe_ids.n <= left;
}

/* Replaces a drawn token that would not leave room to close: the answer
 * closes now (c->close: the current state's shortest completion, which
 * fits, or must_close would have begun it), or ends with the end token
 * when the state is already complete. The token to take instead: the
 * drawn one itself when no completion can be had (a parse too deep for
 * it, or no memory: the limit then cuts the answer as it would anyway). */
static int32_t close_now(const gem_engine *e, constraint *c, int32_t drawn) {
    c->cbytes.len = 0;
    c->close.n = 0;
    c->close_at = 0;
    if (gram_state_done(c->st)) return tok_eos(e->tok);
    if (!gram_state_complete(c->st, &c->cbytes) && c->cbytes.len &&
        !tok_encode(e->tok, c->cbytes.p, c->cbytes.len, 0, 1, &c->close) && c->close.n) {
        c->closing = 1;
        return c->close.v[c->close_at++];
    }
    return drawn;
}

/* The token the grammar lets the sampler draw: cand (the unconstrained
 * greedy choice, or -1) when the grammar allows it (an argmax among the
 * allowed tokens is then cand itself), else a draw from the logits with
 * every token the grammar does not allow at -inf. */
static int32_t constrained_draw(gem_session *s, sampler *smp, constraint *c, int32_t cand, gem_err *err) {
    if (cand >= 0 && gram_token_ok(c->st, c->gv, cand)) return cand;
    const float *l = gem_session_logits(s);
    if (!l) {
        gem_err_set(err, "no logits to sample from (nothing evaluated, or the backend failed)");
        return -1;
    }
    const int n_ok = gram_mask(c->st, c->gv, c->bits);
    if (n_ok < 0) {
        gem_err_set(err, "out of memory");
        return -1;
    }
    if (n_ok == 0) {
        gem_err_set(err, "the output grammar allows no token here (a dead end)");
        return -1;
    }
    /* a plain argmax over few allowed tokens visits only them (structural
     * positions allow a handful); otherwise the logits are copied under
     * the mask word by word (whole words allowed or refused at once: the
     * mask's cost is a copy of the logits, not a branch per token) */
    const uint32_t V = s->e->n_vocab;
    if (sampler_is_greedy(smp) && n_ok <= GEN_FEW_ALLOWED) {
        int32_t best = -1;
        for (uint32_t w = 0; w < (V + 31) / 32; w++)
            for (uint32_t b = c->bits[w]; b; b &= b - 1) {
                const int32_t i = (int32_t)(32 * w + (uint32_t)__builtin_ctz(b));
                if (best < 0 || l[i] > l[best]) best = i; /* ascending ids: ties keep the lowest, as gem_argmax */
            }
        return best;
    }
    for (uint32_t w = 0; w < (V + 31) / 32; w++) {
        const uint32_t b = c->bits[w];
        float *m = c->masked + 32 * w;
        const float *src = l + 32 * w;
        const uint32_t width = V - 32 * w < 32 ? V - 32 * w : 32; /* a vocabulary's last, partial word */
        if (b == 0xffffffffu && width == 32) memcpy(m, src, 32 * sizeof *m);
        else
            for (uint32_t k = 0; k < width; k++) m[k] = b >> k & 1 ? src[k] : -INFINITY;
    }
    size_t nh;
    const int32_t *hist = gem_session_tokens(s, &nh);
    return sampler_sample(smp, c->masked, hist, nh);
}

static void to_stopper(const char *p, size_t n, void *ctx) {
    text_sink *t = ctx;
    stopper_feed(&t->st, p, n, to_caller, t);
}

int gem_session_generate(gem_session *s, const gem_gen_params *p, const gem_gen_callbacks *cbp, gem_gen_result *r,
                         gem_err *err) {
    static const gem_gen_callbacks none;
    const gem_gen_callbacks *cb = cbp ? cbp : &none;
    gem_engine *e = s->e;
    memset(r, 0, sizeof *r);
    r->finish = GEM_FINISH_ERROR;
    r->stop_index = -1;
    if (!s->synced) return gem_err_set(err, "nothing to generate from: gem_session_sync sets the prompt");
    s->synced = 0;
    const uint32_t V = e->n_vocab;
    for (long i = 0; i < p->n_force; i++)
        if (p->force[i] < 0 || (uint32_t)p->force[i] >= V)
            return gem_err_set(err, "forced token id %d is out of the vocabulary", p->force[i]);
    const int32_t *prompt = s->prompt;
    const size_t n = s->n_prompt;
    r->n_prompt = (long)n;
    r->n_cached = (long)s->n_kept;
    sampler *smp = sampler_new(&p->sampling, V);
    if (!smp) return gem_err_set(err, "out of memory");
    /* greedy without penalties: the argmax is taken on the backend and only
     * the chosen id comes back (a GPU then skips reading the vocabulary) */
    const int greedy = sampler_is_greedy(smp) && !p->want_logits;
    const double t0 = gem_now_s();
    double t_first = t0;
    const int in_skip = p->stop_skip_inside && p->stop_skip_open && p->stop_skip_close;
    text_sink text = {cb, {p->stop, p->stop_len, p->n_stop, p->stop_skip_open, p->stop_skip_close, {0}, 0, in_skip, 0}, 0};
    tok_stream ts = {{0}, 0};
    const int detok = cb->on_text || p->n_stop > 0;
    int rc = -1;
    int decoding = 0; /* counted in the engine's decoding generations */
    float *row_logits = NULL; /* sampled speculative rounds: every row's logits */
    constraint con = {0};
    if (p->grammar) {
        pthread_mutex_lock(&e->mu); /* built once, by the first constrained generation of any session */
        if (!e->gv) e->gv = gram_vocab_new(e->tok, err);
        pthread_mutex_unlock(&e->mu);
        if (!e->gv) goto out;
        if (gram_vocab_size(e->gv) != V) {
            gem_err_set(err, "the grammar vocabulary has %u tokens, the model %u", gram_vocab_size(e->gv), (unsigned)V);
            goto out;
        }
        con.gv = e->gv;
        con.st = gram_state_new(p->grammar);
        con.bits = malloc((V + 31) / 32 * sizeof *con.bits);
        con.masked = malloc((size_t)(V + 31) / 32 * 32 * sizeof *con.masked);
        if (!con.st || !con.bits || !con.masked) {
            gem_err_set(err, "out of memory");
            goto out;
        }
    }

    size_t ck_at = p->no_checkpoint ? (size_t)-1 : n; /* the last turn start, or the end */
    const size_t nt = (size_t)e->n_turn;
    if (nt && !p->no_checkpoint)
        for (size_t i = n; i-- > 1;)
            if (i + nt <= n && !memcmp(prompt + i, e->turn_ids, nt * sizeof *prompt)) {
                ck_at = i;
                break;
            }
    int32_t next = -1; /* the backend's argmax after the last eval, when greedy */
    for (size_t pos = s->n_tokens; pos < n;) {
        if (pos == ck_at) keep_checkpoint(s);
        if (cb->on_prefill) cb->on_prefill(cb->ctx, (long)pos, (long)n);
        if (cb->poll && cb->poll(cb->ctx)) {
            r->finish = GEM_FINISH_CANCELLED;
            rc = 0;
            goto out;
        }
        size_t end = pos + (size_t)e->tile < n ? pos + (size_t)e->tile : n;
        if (pos < ck_at && ck_at < end) end = ck_at;
        const int cnt = (int)(end - pos);
        int bad;
        if (end == n && greedy) bad = gem_session_eval_greedy(s, prompt + pos, cnt, &next, err);
        else if (end == n || end == ck_at) bad = gem_session_eval(s, prompt + pos, cnt, err);
        else bad = session_prefill(s, prompt + pos, cnt, err);
        if (bad) goto fail;
        pos = end;
    }
    session_wait(s); /* the prompt's work done, not only enqueued: its time is prompt_s */
    r->prompt_s = gem_now_s() - t0;
    if (cb->on_prefill) cb->on_prefill(cb->ctx, (long)n, (long)n);
    session_decoding(s, 1); /* its steps may now batch with other sessions' */
    decoding = 1;
    /* the checkpoint at the prompt's end waits for the first token */
    int ck_end = ck_at == n;

    const long room = (long)e->n_ctx - (long)n;
    const long max = p->max_tokens < 0 || p->max_tokens > room ? room : p->max_tokens;
    /* speculation: greedy rounds compare the target's argmaxes with the
     * drafts; sampled ones draw each row's token with the sampler, as
     * plain decoding would draw it, and accept while it equals the draft
     * (one draw per emitted token: the same seed gives the same answer) */
    const int spec = spec_has_drafter(s) && p->draft_max > 0 && !p->want_logits && !p->grammar;
    int32_t drafts[SPEC_ROWS], rows[SPEC_ROWS], best[SPEC_ROWS];
    int n_drafts = 0, di = 0; /* the current round's accepted drafts, di of them emitted */
    /* drafts per round: spec_policy's choice (the count that measures
     * fastest here, 0 where no round pays), draft_max when fixed */
    {
        const int k_hi = p->draft_max < SPEC_ROWS - 1 ? p->draft_max : SPEC_ROWS - 1;
        const int k_lo = p->draft_min < k_hi ? p->draft_min : k_hi;
        if (!s->pol_set || !spec_policy_same(&s->pol, k_lo, k_hi, p->draft_fixed)) {
            spec_policy_init(&s->pol, k_lo, k_hi, p->draft_fixed);
            s->pol_set = 1;
        }
    }
    spec_policy *const pol = &s->pol;
    double t_plain = -1; /* when the pending plain step began (its next id not yet drawn) */
    r->finish = GEM_FINISH_LENGTH;
    for (long k = 0; k < max; k++) {
        const int forced = k < p->n_force;
        const int drafted = di < n_drafts; /* verified: already evaluated */
        int32_t id;
        if (con.st && !drafted && !forced && !con.closing) {
            const int c = must_close(e, &con, max - k);
            if (c < 0) {
                gem_err_set(err, "out of memory");
                goto fail;
            }
            con.closing = c;
        }
        if (drafted) id = drafts[di++];
        else if (forced) id = p->force[k];
        else if (con.closing && con.close_at < con.close.n) id = con.close.v[con.close_at++];
        else if (next >= 0) {
            id = next;
            if (!greedy) next = -1; /* a sampled round's draw, used once */
            if (con.st && (id = constrained_draw(s, smp, &con, id, err)) < 0) goto fail;
        } else if (con.st) {
            /* an argmax draw (greedy with penalties or biases) is checked
             * unconstrained first; any other draw needs the mask */
            int32_t cand = -1;
            if (p->sampling.temp <= 0 && (cand = gem_session_sample(s, smp, err)) < 0) goto fail;
            if ((id = constrained_draw(s, smp, &con, cand, err)) < 0) goto fail;
        } else if ((id = gem_session_sample(s, smp, err)) < 0) goto fail;
        if (con.st && !drafted && !forced && !con.closing && max - k <= GEN_CLOSE_LOOK) {
            const int f = fits_after(e, &con, id, max - k - 1);
            if (f < 0) {
                gem_err_set(err, "out of memory");
                goto fail;
            }
            if (!f) id = close_now(e, &con, id);
        }
        /* a plain step's time ends when its next token is known; a forced
         * token waited for nothing (the step may still be queued): no sample */
        if (t_plain >= 0 && !drafted && !forced) spec_policy_plain(pol, gem_now_s() - t_plain);
        t_plain = -1;
        if (k == 0) {
            t_first = gem_now_s();
            r->first_s = t_first - t0;
        }
        /* a drafted token sits before the newest evaluated one */
        const size_t at = drafted ? s->n_tokens - 1 - (size_t)(n_drafts - di) : s->n_tokens;
        gem_gen_token t = {id, k, at, forced, !p->ignore_eos && tok_is_eog(e->tok, id), NULL};
        if (p->want_logits && !(t.logits = gem_session_logits(s))) {
            gem_err_set(err, "the backend's logits could not be read");
            goto fail;
        }
        if (con.st && gram_accept_token(con.st, con.gv, id)) { /* only a forced token can be refused */
            gem_err_set(err, "forced token %d is not allowed by the output grammar", id);
            goto fail;
        }
        if (cb->on_token) cb->on_token(cb->ctx, &t);
        int stop = 0;
        if (t.end) {
            r->finish = GEM_FINISH_STOP;
            stop = 1;
        } else {
            r->n_generated++;
            if (detok) {
                size_t len;
                const char *piece = tok_piece(e->tok, id, 0, &len);
                tok_stream_feed(&ts, piece, len, to_stopper, &text);
                if (text.st.hit || text.stop) {
                    r->finish = GEM_FINISH_STOP;
                    stop = 1;
                }
            }
            /* nothing may follow, or the closing completion is out: no step
             * for the end token */
            if (!stop && con.st &&
                (gram_state_ended(con.st) || (con.closing && con.close_at == con.close.n && gram_state_done(con.st)))) {
                r->finish = GEM_FINISH_STOP;
                stop = 1;
            }
            if (!stop && cb->poll && cb->poll(cb->ctx)) {
                r->finish = GEM_FINISH_CANCELLED;
                stop = 1;
            }
        }
        if (!stop && ck_end) { /* the first token has gone out (poll sent it) */
            keep_checkpoint(s);
            ck_end = 0;
        }
        if (stop || k + 1 == max) {
            /* plain decoding never evaluates its last token: drop this
             * draft and the ones verified after it */
            if (drafted) {
                gate_enter(e, 0);
                spec_keep(s, n_drafts + 1, di);
                gate_leave(e);
                r->n_accepted -= n_drafts - di; /* accepted, never sent */
            }
            break;
        }
        if (drafted) { /* once the round's drafts are out, the target's own next token follows */
            if (di == n_drafts) n_drafts = di = 0;
            continue;
        }
        /* id is the newest token, not yet evaluated: a round drafts after it
         * (as many as the answer may still take), verifies id and the drafts
         * in one tile, and keeps id and the drafts the target agrees with;
         * the target's token after them is next */
        int m = 0;
        const long left = max - k - 2; /* tokens after id beyond the target's own next one */
        double t_round = 0, t_verify = 0;
        /* a round holds the backend for its drafts and verification: only
         * while no other generation decodes (their steps would wait) */
        const int round = spec && k + 1 >= p->n_force && session_alone(s);
        if (round) gate_enter(e, 0);
        if (round) {
            long space = left > 0 ? left : 0;
            if (space > (long)e->n_ctx - (long)s->n_tokens - 1) space = (long)e->n_ctx - (long)s->n_tokens - 1;
            const int want = spec_policy_choose(pol, space > SPEC_ROWS ? SPEC_ROWS : (int)space);
            t_round = gem_now_s();
            if (want > 0 && (m = spec_draft(s, id, want, p->draft_p_min, p->draft_p_prod, drafts, err)) < 0) {
                gate_leave(e);
                goto fail;
            }
            t_verify = gem_now_s();
        }
        if (round && m <= 0) gate_leave(e);
        if (m > 0) {
            rows[0] = id;
            memcpy(rows + 1, drafts, (size_t)m * sizeof *drafts);
            if (!greedy && !row_logits &&
                !(row_logits = malloc((size_t)SPEC_ROWS * V * sizeof *row_logits))) {
                gate_leave(e);
                gem_err_set(err, "out of memory");
                goto fail;
            }
            if (spec_verify(s, rows, m + 1, best, greedy ? NULL : row_logits, err)) {
                gate_leave(e);
                goto fail;
            }
            int acc = 0;
            if (greedy) {
                while (acc < m && best[acc] == drafts[acc]) acc++;
            } else {
                size_t nh;
                const int32_t *hist = gem_session_tokens(s, &nh);
                const size_t base = nh - (size_t)(m + 1);
                for (;; acc++) {
                    best[acc] = sampler_sample(smp, row_logits + (size_t)acc * V, hist, base + (size_t)acc + 1);
                    if (acc == m || best[acc] != drafts[acc]) break;
                }
            }
            spec_keep(s, m + 1, acc + 1);
            gate_leave(e);
            const double t_end = gem_now_s();
            spec_policy_round(pol, m, acc, t_verify - t_round, t_end - t_verify);
            r->n_rounds++;
            r->n_drafted += m;
            r->n_accepted += acc;
            next = best[acc];
            n_drafts = acc;
            di = 0;
            continue;
        }
        if (spec) t_plain = gem_now_s();
        /* alone, or batched with other sessions' steps: the same logits */
        if (session_step(s, id, &next, err)) goto fail;
        if (!greedy) next = -1; /* drawn by the sampler from the logits */
    }
    if (ck_end && s->n_tokens == n) keep_checkpoint(s); /* nothing was evaluated after the prompt */
    if (detok && !text.st.hit && !text.stop) {
        tok_stream_flush(&ts, to_stopper, &text);
        stopper_flush(&text.st, to_caller, &text);
    }
    r->decode_s = r->n_generated > 0 ? gem_now_s() - t_first : 0;
    r->stop_index = text.st.hit ? text.st.which : -1;
    rc = 0;
    goto out;
fail:
    r->finish = GEM_FINISH_ERROR;
    session_clear(s); /* what a failed evaluation left is not known */
out:
    if (decoding) session_decoding(s, -1);
    if (r->prompt_s == 0 && rc == 0) r->prompt_s = gem_now_s() - t0;
    stopper_free(&text.st);
    sampler_free(smp);
    free(row_logits);
    gram_state_free(con.st);
    free(con.bits);
    free(con.masked);
    sb_free(&con.cbytes);
    tok_ids_free(&con.close);
    tok_ids_free(&con.probe_ids);
    gram_state_free(con.probe);
    return rc;
}
