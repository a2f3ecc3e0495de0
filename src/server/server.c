/* `gem serve` (see server.h): sockets, connection threads, the bounded
 * queue and the engine worker.
 *
 * Threads. The main thread accepts connections and starts one detached
 * thread per connection (at most max_conns open; when that many are, a
 * connection that sends a complete head within a second takes the place
 * of one idle or receiving its request longest, else it gets 503: see
 * conn_evict and the probation set). A connection thread reads requests
 * with deadlines (a head within --header-timeout, the whole request within
 * --timeout, else 408; an endless head 431), charges each body to the
 * in-flight budget (--max-inflight: 503 unread when it would pass it),
 * answers everything that needs no engine itself (health, models, props,
 * tokenize, errors) and turns a completion request into a job: validated,
 * rendered and tokenized, so a bad request never waits for the engine.
 * Jobs wait in a bounded FIFO (full: 503 with Retry-After; a waiting
 * streaming client gets the SSE head and ": queued" comments, a waiting
 * client that leaves is taken out of the queue). The engine has
 * --parallel N slots, each a session with its own caches and a thread
 * that runs one job at a time and writes the response to the job's socket
 * itself, so each token goes out as soon as it is final; the slots'
 * generations run together, their decode steps batched by the engine
 * (engine.h). A queued job goes to the free slot whose session holds the
 * longest prefix of its prompt (dispatch). The connection thread sleeps
 * until its job is done, then reads the connection's next request.
 *
 * Generation is the engine's (gem_session_sync, gem_session_generate):
 * a slot maps a job to its parameters and callbacks. Its session keeps
 * the tokens of its last request and its turn checkpoint, so a chat's next
 * turn continues where the engine's prefix policy allows (engine.h).
 *
 * Cancellation. Between prompt tiles (the backend's own: never cut smaller
 * to poll more often) and after every generated token the worker polls the
 * client's socket: a hang-up, a reset or an orderly close (recv peek of 0
 * bytes) cancels the job, as does a failed send (sends use MSG_NOSIGNAL and
 * SIGPIPE is ignored, so a broken pipe is only an error code). A send
 * blocked on a client that stopped reading gives up after send_timeout.
 * Cancelling only stops the job; the session keeps whatever it evaluated,
 * which is a valid state for prefix reuse. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat.h"
#include "engine/engine.h"
#include "engine/logprobs.h"
#include "server/anthropic.h"
#include "server/api.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/pcache.h"
#include "server/reply.h"
#include "util/rng.h"
#include "util/clock.h"
#include "util/sysmem.h"

#define MAX_HEAD (16 * 1024)

typedef struct server server;
typedef struct slot slot;

typedef struct job {
    server *s;
    int fd;
    api_request req;
    tok_ids *prompts; /* one (chat), or a completion's prompts in order */
    size_t n_prompts;
    gram *grammar; /* what the answer must follow (api_grammar), or NULL */
    int anth;     /* POST /v1/messages: Anthropic's errors, events and ids (anthropic.h) */
    int keep_alive;
    int http10;   /* HTTP/1.0 has no chunked coding: a stream ends by closing */
    char peer[64], path[64];
    /* under the server's mutex: started is set by the worker when it takes
     * the job; until then only the connection thread writes to the socket
     * (the SSE head and ": queued" comments), and head_sent says so */
    int started, head_sent;
    /* set by dispatch: the slot parks its state first (a conversation
     * this job does not continue), then continues from unpark (taken out
     * of the prompt cache), when set */
    int park;
    gem_park *unpark;
    int unpark_moved; /* unpark was taken out of the cache (else it is pinned there) */
    /* set by the slot that runs it */
    int done, close_conn, status;
    pthread_cond_t cond;
    struct job *next;
} job;

struct server {
    server_opts o;
    int lfd;
    char alias[256];
    long long started;
    pthread_mutex_t mu;
    job *head, *tail;
    int n_waiting;
    atomic_int ready, stop, n_conns, failed;
    atomic_ullong counter;
    atomic_size_t inflight; /* request body bytes charged to --max-inflight (budget_charge) */
    /* the open connections (--max-conns places, NULL where free), each
     * with its phase; guarded by conn_mu (see conn_evict) */
    pthread_mutex_t conn_mu;
    struct conn **conns;
    uint64_t id_base;
    char load_error[1024];
    /* engine state: set by the loader before ready */
    gem_engine *e;
    slot *slots;
    int n_slots;
    unsigned long long dispatched; /* under mu: jobs given to slots */
    const tok *tk;
    int n_ctx;
    uint32_t n_vocab;
    chat_format chat; /* the model's chat format: template, answer parser, reasoning markers */
    int32_t thought_open, thought_close; /* the reasoning channel's marker tokens (-1: none) */
    int loopback; /* the listening socket's address is a loopback one (the Host guard applies) */
    metrics *m;   /* /metrics */
    pcache *pc;   /* the prompt cache (--cache-ram; NULL: off), under mu */
    /* when a running answer is ended after SIGTERM (--shutdown-grace);
     * written before stop is set, read after stop is seen */
    double stop_deadline;
};

/* A session and the thread that runs its jobs. */
struct slot {
    server *s;
    int id;
    gem_session *sess;
    pthread_t th;
    int started; /* th was created */
    /* under the server's mutex */
    pthread_cond_t cv;
    job *assigned; /* the job dispatch gave it, until it is done */
    int running;
    int32_t *held; /* the tokens its session held after its last job (dispatch's prefix match) */
    unsigned long long last_used; /* dispatch's serial of its last job (0: never used) */
    int finishing; /* its job has generated everything and is sending the end of its response */
    size_t n_held, held_cap;
};

/* Records the tokens the slot's session holds (dispatch's prefix match).
 * Under the server's mutex. */
static void slot_held(slot *sl) {
    size_t held;
    const int32_t *t = gem_session_tokens(sl->sess, &held);
    if (held > sl->held_cap) {
        int32_t *h = realloc(sl->held, held * sizeof *h);
        if (h) sl->held = h, sl->held_cap = held;
    }
    sl->n_held = held <= sl->held_cap ? held : 0; /* no memory for the copy: matched as empty */
    if (sl->n_held) memcpy(sl->held, t, sl->n_held * sizeof *t);
}

/* SIGINT and SIGTERM received so far, counted up to 2: the first stops the
 * accept loop and starts --shutdown-grace, a second ends the grace at once
 * (gen_poll). A global because a signal handler reaches nothing else; only
 * the handler writes it. */
static volatile sig_atomic_t got_signal;

static void on_signal(int sig) {
    (void)sig;
    if (got_signal < 2) got_signal++;
}

static void logf_(const char *fmt, ...) GEM_PRINTF(1, 2);
static void logf_(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gem serve: %s\n", line); /* one write per line: threads do not interleave */
}

/* ---- sockets ---- */

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 1 when the client closed or reset its connection. Data waiting to be read
 * (a pipelined request) is not a disconnect. */
static int client_gone(int fd) {
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return 1;
    if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return 0;
}

static void extra_headers(const server *s, strbuf *x) {
    if (s->o.cors) sb_printf(x, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", s->o.cors);
}

/* head_only: the answer to a HEAD request, the head a GET would get and no
 * body (RFC 9110; a body there would be read as the next response). */
static int respond_h(server *s, int fd, int status, const char *ctype, const char *body, size_t n, int keep,
                     const char *more, int head_only) {
    strbuf out = {0}, x = {0};
    extra_headers(s, &x);
    if (more) sb_puts(&x, more);
    http_head(&out, status, ctype, (long long)n, keep, x.len ? x.p : NULL);
    if (!head_only) sb_put(&out, body, n);
    int rc = out.failed ? -1 : send_all(fd, out.p, out.len);
    sb_free(&out);
    sb_free(&x);
    return rc;
}

static int respond(server *s, int fd, int status, const char *ctype, const char *body, size_t n, int keep,
                   const char *more) {
    return respond_h(s, fd, status, ctype, body, n, keep, more, 0);
}

static int respond_json_h(server *s, int fd, int status, strbuf *body, int keep, const char *more, int head_only) {
    if (body->failed) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return respond_h(s, fd, 500, "application/json", oom, sizeof oom - 1, 0, NULL, head_only);
    }
    return respond_h(s, fd, status, "application/json", sb_cstr(body), body->len, keep, more, head_only);
}
static int respond_json(server *s, int fd, int status, strbuf *body, int keep, const char *more) {
    return respond_json_h(s, fd, status, body, keep, more, 0);
}

/* anth: the error in Anthropic's shape (its routes), else OpenAI's */
static int respond_error_as(server *s, int fd, const api_error *e, int anth, int keep, const char *more, int head_only) {
    strbuf b = {0};
    if (anth) anth_error_json(e, &b);
    else api_error_json(e, &b);
    int rc = respond_json_h(s, fd, e->status, &b, keep, more, head_only);
    sb_free(&b);
    return rc;
}
static int respond_error_h(server *s, int fd, const api_error *e, int keep, const char *more, int head_only) {
    return respond_error_as(s, fd, e, 0, keep, more, head_only);
}
static int respond_error(server *s, int fd, const api_error *e, int keep, const char *more) {
    return respond_error_h(s, fd, e, keep, more, 0);
}

/* ---- the worker ---- */

typedef struct {
    server *s;
    job *j;
    gem_session *sess; /* the slot's */
    reply *rp;
    anth_reply *ar; /* an Anthropic request's reply, in rp's place */
    chat_parser *cp;
    int stream, gone;
    long polls, n_tokens; /* calls of gen_poll and gen_token so far */
    int in_thought;       /* the last marker token seen opened the reasoning channel */
    long reasoning_tokens; /* generated tokens from an opening marker to its closing one, both included */
    double last_send;
    strbuf frame;
    /* logprobs: alternatives per token, scratch for them, and (completions)
     * the characters of the choice's text before the next token */
    int logprobs, top;
    int32_t *top_ids;
    double *top_lps;
    reply_alt *alts;
    long text_off;
    char bad_call[80]; /* a call to a function the request did not declare: the answer ends, as an error */
    int shutdown;      /* the server is stopping and the grace period is over: the answer ends, as an error */
    /* a long prompt's progress in the log (gen_prefill) */
    long prefill_from, prefill_logged;
    double prefill_t0;
} gen;

/* Whether the request's tools declare a function of this name. */
static int tool_declared(const json *tools, const char *name) {
    for (size_t i = 0; tools && i < tools->len; i++) {
        const json *f = json_get(tools->items[i], "function");
        const char *n = f ? json_get_str(f, "name") : NULL;
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

static void on_chat_event(const chat_event *ev, void *ctx) {
    gen *g = ctx;
    if (g->bad_call[0]) return;
    /* the model may name a function that was never declared (a grammar
     * prevents it only under tool_choice required or named): never handed
     * to the client as a call it could run */
    if (ev->kind == CHAT_EV_TOOL_CALL && !tool_declared(g->j->req.tools, ev->name)) {
        snprintf(g->bad_call, sizeof g->bad_call, "%s", ev->name);
        return;
    }
    if (g->ar) anth_reply_event(g->ar, ev);
    else if (ev->kind == CHAT_EV_CONTENT) reply_text(g->rp, ev->text, ev->len);
    else if (ev->kind == CHAT_EV_REASONING) reply_reasoning(g->rp, ev->text, ev->len);
    else reply_tool_call(g->rp, ev->name, ev->arguments);
}

/* One piece of a streamed body: a chunk, or the bytes as they are for an
 * HTTP/1.0 client (whose stream ends when the connection closes). */
static void stream_frame(const job *j, strbuf *out, const char *p, size_t n) {
    if (!j->http10) http_chunk(out, p, n);
    else if (n) sb_put(out, p, n);
}

static strbuf *gen_out(gen *g) { return g->ar ? anth_reply_out(g->ar) : reply_out(g->rp); }

/* Sends what the reply has ready as one chunk of the SSE stream. */
static void flush_stream(gen *g) {
    strbuf *o = gen_out(g);
    if (!o->len || g->gone) {
        o->len = 0;
        return;
    }
    g->frame.len = 0;
    stream_frame(g->j, &g->frame, o->p, o->len);
    o->len = 0;
    if (g->frame.failed || send_all(g->j->fd, g->frame.p, g->frame.len)) g->gone = 1;
    g->last_send = gem_now_s();
}

static void send_sse_comment(gen *g, const char *text) {
    strbuf *o = gen_out(g);
    sb_printf(o, ": %s\n\n", text);
    flush_stream(g);
}

/* Characters in p[0..n) (UTF-8 lead bytes): a completion's text_offset
 * counts characters, as OpenAI's does. */
static long n_chars(const char *p, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xc0) != 0x80;
    return c;
}

/* Lists token id with its log-probability lp and its n_top most likely
 * alternatives (ids, lps); lp NAN: an echoed prompt's first token, which
 * nothing predicted. The token's text spells special tokens out. */
static void list_token(gen *g, int32_t id, double lp, const int32_t *ids, const double *lps, int n_top) {
    const tok *tk = g->s->tk;
    for (int i = 0; i < n_top; i++) {
        g->alts[i].text = tok_piece(tk, ids[i], 1, &g->alts[i].len);
        g->alts[i].logprob = lps[i];
    }
    reply_lp e = {{NULL, 0, lp}, g->alts, n_top, g->text_off};
    e.tok.text = tok_piece(tk, id, 1, &e.tok.len);
    reply_logprob(g->rp, &e);
    size_t n;
    const char *shown = tok_piece(tk, id, 0, &n);
    g->text_off += n_chars(shown, n);
}

/* The log-probability of id under logits, the distribution it was drawn
 * from: the model's log-softmax in double, before temperature, penalties
 * and bias; the top alternatives go to g's scratch. */
static double token_logprob(gen *g, int32_t id, const float *logits) {
    const double lse = gem_top_logprobs(logits, (int)g->s->n_vocab, g->top > 0 ? g->top : 1, g->top_ids, g->top_lps);
    return (double)logits[id] - lse;
}

/* The engine's generation callbacks (engine.h gem_gen_callbacks). */
static void gen_token(void *ctx, const gem_gen_token *t) {
    gen *g = ctx;
    g->n_tokens++;
    if (t->id == g->s->thought_open && t->id >= 0) g->in_thought = 1;
    if (g->in_thought) g->reasoning_tokens++;
    if (t->id == g->s->thought_close && t->id >= 0) g->in_thought = 0;
    if (t->end) return;
    if (g->rp) reply_token(g->rp, t->id);
    /* every answer token is listed, the reasoning channel's and tool
     * calls' included (they are tokens the model drew); the end token,
     * not part of the answer, is not */
    if (g->logprobs && t->logits) {
        const double lp = token_logprob(g, t->id, t->logits);
        list_token(g, t->id, lp, g->top_ids, g->top_lps, g->top);
    }
}

/* The answer's final text: through the chat parser (which ends the answer
 * at the turn's end or after its tool calls), or as the completion's text. */
static int gen_text(void *ctx, const char *p, size_t n) {
    gen *g = ctx;
    if (!g->cp) {
        reply_text(g->rp, p, n);
        return 0;
    }
    chat_parser_feed(g->cp, p, n);
    return chat_parser_ended(g->cp) || g->bad_call[0];
}

/* Before each prompt tile and after every token: a stream sends what is
 * ready, and between prompt tiles a comment when nothing was sent for a
 * heartbeat interval (so proxies keep a long prefill open); a client that
 * left, or the server stopping, cancels the job. */
static int gen_poll(void *ctx) {
    gen *g = ctx;
    const int between_tiles = g->polls++ > 0 && !g->n_tokens;
    if (g->stream) {
        if (gen_out(g)->len) flush_stream(g);
        else if (between_tiles && gem_now_s() - g->last_send >= g->s->o.heartbeat) send_sse_comment(g, "prefill");
    }
    if (!g->gone && client_gone(g->j->fd)) g->gone = 1;
    if (!g->gone && !g->shutdown && atomic_load(&g->s->stop)) {
        if (got_signal > 1) {
            g->shutdown = 1;
            logf_("%s %s: a second signal ended the shutdown grace period", g->j->peer, g->j->path);
        } else if (gem_now_s() >= g->s->stop_deadline) {
            g->shutdown = 1;
        }
    }
    return g->gone || g->shutdown;
}

/* Every PREFILL_LOG_EVERY prompt tokens of a long prompt: a log line with
 * the throughput and the time left (the stream itself gets heartbeat
 * comments from gen_poll meanwhile). */
#define PREFILL_LOG_EVERY 4096
static void gen_prefill(void *ctx, long done, long total) {
    gen *g = ctx;
    if (g->prefill_from < 0) {
        g->prefill_from = g->prefill_logged = done;
        g->prefill_t0 = gem_now_s();
        return;
    }
    if (done >= total || done - g->prefill_logged < PREFILL_LOG_EVERY) return;
    g->prefill_logged = done;
    const double dt = gem_now_s() - g->prefill_t0;
    const long did = done - g->prefill_from;
    logf_("%s %s prompt %ld of %ld tokens (%ld cached), %.0f tok/s, about %.0f s left", g->j->peer, g->j->path, done,
          total, g->prefill_from, dt > 0 ? did / dt : 0.0, did > 0 ? (double)(total - done) * dt / (double)did : 0.0);
}

/* An error after the SSE head went out: one error event, then [DONE]. */
static void stream_error(gen *g, const char *msg) {
    api_error e;
    api_fail(&e, 500, "server_error", NULL, NULL, "%s", msg);
    if (g->ar) {
        anth_reply_error(g->ar, &e);
        flush_stream(g);
        return;
    }
    strbuf *o = reply_out(g->rp);
    sb_puts(o, "data: ");
    api_error_json(&e, o);
    sb_puts(o, "\n\ndata: [DONE]\n\n");
    flush_stream(g);
}

/* An echoed prompt's log-probabilities: each token's under the logits of
 * the position before it (the first has none), with top alternatives. */
typedef struct {
    double *lp;   /* n */
    int32_t *ids; /* n x k */
    double *lps;
    int k;
} prompt_lps;

static void prompt_lps_free(prompt_lps *p) {
    free(p->lp);
    free(p->ids);
    free(p->lps);
    memset(p, 0, sizeof *p);
}

/* Echo with logprobs needs every prompt position's logits: the prompt is
 * evaluated from an empty session in small slices (a slice's logits are
 * slice x vocabulary floats). The session then holds exactly the prompt
 * and its next-token logits, so the sync that follows keeps all of it.
 * 0, 1 when the job was cancelled, -1 with err set. */
#define ECHO_SLICE 16
static int eval_prompt_lps(gen *g, const tok_ids *p, prompt_lps *out, gem_err *err) {
    server *s = g->s;
    const size_t V = s->n_vocab;
    out->k = g->top > 0 ? g->top : 1;
    out->lp = malloc(p->n * sizeof *out->lp);
    out->ids = malloc(p->n * (size_t)out->k * sizeof *out->ids);
    out->lps = malloc(p->n * (size_t)out->k * sizeof *out->lps);
    float *logits = malloc(ECHO_SLICE * V * sizeof *logits);
    int rc = -1;
    if (!out->lp || !out->ids || !out->lps || !logits) {
        gem_err_set(err, "out of memory");
        goto out;
    }
    out->lp[0] = NAN;
    gem_session_reset(g->sess);
    for (size_t pos = 0; pos < p->n;) {
        if (gen_poll(g)) {
            rc = 1;
            goto out;
        }
        const int cnt = (int)(p->n - pos < ECHO_SLICE ? p->n - pos : ECHO_SLICE);
        if (gem_session_eval_all(g->sess, p->v + pos, cnt, logits, err)) goto out;
        for (int r = 0; r < cnt && pos + (size_t)r + 1 < p->n; r++) {
            const size_t at = pos + (size_t)r + 1;
            const float *row = logits + (size_t)r * V;
            const double lse = gem_top_logprobs(row, (int)V, out->k, out->ids + at * (size_t)out->k,
                                                out->lps + at * (size_t)out->k);
            out->lp[at] = (double)row[p->v[at]] - lse;
        }
        pos += (size_t)cnt;
    }
    rc = 0;
out:
    free(logits);
    return rc;
}

/* The text an echo puts before a choice's: the prompt as sent, or its
 * ids' text. */
static void echo_text(server *s, const api_prompt *ap, const tok_ids *ids, strbuf *out) {
    if (!ap->ids) {
        sb_put(out, ap->text, ap->len);
        return;
    }
    for (size_t i = 0; i < ids->n; i++) {
        size_t n;
        const char *p = tok_piece(s->tk, ids->v[i], 0, &n);
        sb_put(out, p, n);
    }
}

static void run_job(server *s, slot *sl, job *j) {
    api_request *rq = &j->req;
    int chat = rq->kind == API_CHAT, stream = rq->stream;
    size_t prompt_all = 0; /* every prompt's tokens, once each */
    for (size_t p = 0; p < j->n_prompts; p++) prompt_all += j->prompts[p].n;
    if (client_gone(j->fd)) { /* left while queued, or half-closed after sending (nc -N): treated as gone */
        j->close_conn = 1;
        j->status = 499;
        logf_("%s %s 499: the client closed its side before the request ran", j->peer, j->path);
        return;
    }
    uint64_t serial = atomic_fetch_add(&s->counter, 1);
    char id[64];
    snprintf(id, sizeof id, "%s%016llx", j->anth ? "msg_" : chat ? "chatcmpl-" : "cmpl-",
             (unsigned long long)rng_mix64(s->id_base + serial));
    reply_opts ro = {rq->kind, stream, rq->include_usage, rq->return_tokens, id,
                     rq->model ? rq->model : s->alias, s->o.version, (long long)time(NULL), rq->logprobs};
    gen g = {0};
    g.s = s;
    g.j = j;
    g.sess = sl->sess;
    g.stream = stream;
    anth_reply_opts ao = {stream, id, ro.model};
    if (j->anth) g.ar = anth_reply_new(&ao);
    else g.rp = reply_new(&ro);
    g.logprobs = rq->logprobs;
    g.top = rq->top_logprobs;
    const int k = g.top > 0 ? g.top : 1;
    g.top_ids = malloc((size_t)k * sizeof *g.top_ids);
    g.top_lps = malloc((size_t)k * sizeof *g.top_lps);
    g.alts = malloc((size_t)k * sizeof *g.alts);
    gem_gen_params gp = gem_gen_params_default();
    gp.sampling = rq->sampling;
    /* choice i of a prompt is drawn with seed + i: n = 1 draws as before */
    const uint64_t seed = rq->seed_given ? rq->sampling.seed : rng_mix64(s->id_base ^ serial ^ (uint64_t)time(NULL));
    gp.max_tokens = rq->max_tokens;
    gp.ignore_eos = rq->ignore_eos;
    gp.want_logits = rq->logprobs; /* speculative decoding is off then (engine.h) */
    gp.grammar = j->grammar;      /* and under a grammar */
    gp.stop = rq->stop;
    gp.stop_len = rq->stop_len;
    gp.n_stop = rq->n_stop;
    gp.stop_skip_open = chat_format_markers(s->chat)->reasoning_open; /* no stop string inside the thought */
    gp.stop_skip_close = chat_format_markers(s->chat)->reasoning_close;
    /* Qwen3.5's generation prompt opens <think>: the answer starts in its thought */
    const int opens = chat && api_opens_reasoning(rq);
    gp.stop_skip_inside = opens;
    if (s->o.draft_max >= 0) gp.draft_max = s->o.draft_max;
    if (s->o.draft_min >= 0) gp.draft_min = s->o.draft_min;
    if (s->o.draft_p_min >= 0) gp.draft_p_min = (float)s->o.draft_p_min;
    if (s->o.draft_p_prod >= 0) gp.draft_p_prod = (float)s->o.draft_p_prod;
    if (s->o.draft_fixed) gp.draft_fixed = 1;
    /* the test hook's text, then an end token, instead of drawn tokens */
    tok_ids forced = {0};
    int forced_ok = !rq->forced_output || (!tok_encode(s->tk, rq->forced_output, rq->forced_output_len, 0, 1, &forced) &&
                                           !tok_ids_push(&forced, tok_eos(s->tk)));
    gp.force = forced.v;
    gp.n_force = (long)forced.n;
    gem_err err = {{0}};
    const char *finish = "length", *fail = NULL;
    char bad_why[160]; /* fail's text for a call to an undeclared function */
    reply_usage u = {0};
    u.prompt_tokens = (int)prompt_all;
    long evaluated = 0; /* prompt tokens evaluated, over all choices */
    int choice = 0, stop_index = -1; /* the stop string that ended the last answer (Anthropic's stop_sequence) */
    prompt_lps plp = {0};
    strbuf echo = {0};
    if (!(g.rp || g.ar) || !forced_ok || !g.top_ids || !g.top_lps || !g.alts) {
        fail = "out of memory";
        goto respond;
    }
    if (stream) {
        strbuf x = {0};
        extra_headers(s, &x);
        sb_puts(&x, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
        if (!j->head_sent) http_head(&g.frame, 200, "text/event-stream", j->http10 ? -2 : -1, j->keep_alive, x.p);
        sb_free(&x);
        if (g.frame.failed || send_all(j->fd, g.frame.p, g.frame.len)) g.gone = 1;
        if (g.rp) reply_start(g.rp);
        flush_stream(&g);
    }
    g.last_send = gem_now_s();
    /* the choices one after another: prompt by prompt, n samples each; the
     * samples after the first sync to the checkpoint the first kept at the
     * prompt's end (or its last turn start), so the prompt is evaluated
     * once, or up to that turn start's few tokens again */
    for (size_t p = 0; p < j->n_prompts && !fail && !g.gone; p++) {
        const tok_ids *ids = &j->prompts[p];
        prompt_lps_free(&plp);
        echo.len = 0;
        if (rq->echo) echo_text(s, &rq->prompts[p], ids, &echo);
        for (int i = 0; i < rq->n && !fail && !g.gone; i++, choice++) {
            if (choice) reply_next(g.rp, finish);
            finish = "length";
            chat_parser_free(g.cp);
            g.cp = NULL;
            if (chat && !(g.cp = chat_parser_new_format(s->chat, on_chat_event, &g))) {
                fail = "out of memory";
                break;
            }
            if (opens) chat_parser_in_reasoning(g.cp);
            if (g.cp) chat_parser_set_tools(g.cp, rq->tools);
            if (g.cp && rq->single_call) chat_parser_max_calls(g.cp, 1); /* parallel_tool_calls: false */
            g.polls = g.n_tokens = 0;
            g.in_thought = opens;
            g.text_off = 0;
            if (!rq->cache_prompt && i == 0) gem_session_reset(g.sess);
            if (rq->echo && rq->logprobs && !plp.lp) {
                const double t0 = gem_now_s();
                const int rc = eval_prompt_lps(&g, ids, &plp, &err);
                u.prompt_ms += (gem_now_s() - t0) * 1e3;
                if (rc < 0) fail = err.msg;
                else if (rc > 0 && g.shutdown && !g.gone) fail = "the server is shutting down";
                else if (rc > 0) g.gone = 1;
                if (rc) break;
                evaluated += (long)ids->n;
            }
            if (rq->echo && rq->logprobs)
                for (size_t t = 0; t < ids->n; t++)
                    list_token(&g, ids->v[t], plp.lp[t], plp.ids + t * (size_t)plp.k, plp.lps + t * (size_t)plp.k,
                               t ? g.top : 0);
            if (rq->echo) {
                reply_text(g.rp, echo.p, echo.len);
                g.text_off = n_chars(echo.p, echo.len); /* offsets into the text as returned */
            }
            const long kept = gem_session_sync(g.sess, ids->v, ids->n, &err);
            if (kept < 0) {
                fail = err.msg;
                break;
            }
            if (g.ar && stream) { /* message_start reports the reused prefix: after the sync */
                const anth_usage au = {(int)ids->n, (int)kept, 0};
                anth_reply_start(g.ar, &au);
                flush_stream(&g);
            }
            gp.sampling.seed = seed + (uint64_t)i;
            /* a checkpoint the next sample reuses, even without cache_prompt */
            gp.no_checkpoint = !rq->cache_prompt && i + 1 == rq->n;
            const long reasoning0 = g.reasoning_tokens;
            gem_gen_callbacks cb = {&g, gen_token, gen_text, gen_poll, gen_prefill};
            g.prefill_from = -1;
            gem_gen_result res;
            if (gem_session_generate(g.sess, &gp, &cb, &res, &err)) fail = err.msg;
            else if (res.finish == GEM_FINISH_CANCELLED && g.shutdown && !g.gone) fail = "the server is shutting down";
            else if (res.finish == GEM_FINISH_CANCELLED) g.gone = 1;
            else if (res.finish == GEM_FINISH_STOP) finish = "stop";
            stop_index = res.stop_index;
            evaluated += res.n_prompt - res.n_cached;
            if (res.finish != GEM_FINISH_ERROR) {
                const metrics_answer ma = {res.n_prompt - res.n_cached, res.n_cached, res.n_generated, res.prompt_s,
                                           res.first_s, res.decode_s, res.n_drafted, res.n_accepted};
                metrics_answer_add(s->m, &ma);
            }
            /* usage counts each prompt once, and as cached what its first
             * sample found from earlier requests (an echo's logprobs
             * evaluated all of it); the later samples' reuse is logged */
            if (i == 0 && !(rq->echo && rq->logprobs)) u.cached_tokens += (int)res.n_cached;
            u.prompt_ms += res.prompt_s * 1e3;
            u.completion_tokens += (int)res.n_generated;
            const long reasoning = g.reasoning_tokens - reasoning0;
            u.reasoning_tokens += (int)(reasoning < res.n_generated ? reasoning : res.n_generated);
            u.predicted_ms += res.decode_s * 1e3;
            u.draft_n += res.n_drafted;
            u.draft_n_accepted += res.n_accepted;
            if (g.cp) chat_parser_finish(g.cp);
            if (!fail && g.bad_call[0]) {
                snprintf(bad_why, sizeof bad_why,
                         "the model called the function '%.60s', which the request's 'tools' do not declare",
                         g.bad_call);
                fail = bad_why;
            }
            if (rq->n > 1 || j->n_prompts > 1)
                logf_("%s %s choice %d: prompt %ld tokens, %ld kept, %ld generated", j->peer, j->path, choice,
                      res.n_prompt, res.n_cached, res.n_generated);
        }
    }
    if (choice > 1)
        logf_("%s %s %d choices: %ld prompt tokens evaluated for %zu in the prompts", j->peer, j->path, choice, evaluated,
              prompt_all);
    u.spec = gem_engine_mtp(s->e) != NULL;
respond:
    /* everything is generated: dispatch may now wait for this slot for a
     * request that continues it (the client may send it as soon as the
     * response below ends) */
    pthread_mutex_lock(&s->mu);
    slot_held(sl);
    sl->finishing = 1;
    pthread_mutex_unlock(&s->mu);
    if (g.gone) {
        j->close_conn = 1;
        j->status = 499;
        logf_("%s %s cancelled: the client left (prompt %zu tokens, %d cached, %d generated)", j->peer, j->path,
              prompt_all, u.cached_tokens, u.completion_tokens);
    } else if (fail) {
        j->status = g.shutdown ? 503 : 500;
        if (stream) {
            stream_error(&g, fail);
            g.frame.len = 0;
            stream_frame(j, &g.frame, NULL, 0);
            send_all(j->fd, g.frame.p, g.frame.len);
        } else {
            api_error e;
            if (g.shutdown) api_fail(&e, 503, "unavailable_error", NULL, NULL, "%s", fail);
            else api_fail(&e, 500, "server_error", NULL, NULL, "%s", fail);
            respond_error_as(s, j->fd, &e, j->anth, j->keep_alive && !g.shutdown, NULL, 0);
        }
        if (g.shutdown) j->close_conn = 1;
        logf_("%s %s failed: %s", j->peer, j->path, fail);
    } else {
        if (g.ar) {
            const anth_usage au = {u.prompt_tokens, u.cached_tokens, u.completion_tokens};
            const int si = stop_index;
            anth_reply_finish(g.ar, !strcmp(finish, "length"), si >= 0 ? rq->stop[si] : NULL,
                              si >= 0 ? rq->stop_len[si] : 0, &au);
        } else {
            reply_finish(g.rp, finish, &u);
        }
        strbuf *o = gen_out(&g);
        if (stream) {
            flush_stream(&g);
            g.frame.len = 0;
            stream_frame(j, &g.frame, NULL, 0);
            if (g.gone || send_all(j->fd, g.frame.p, g.frame.len)) j->close_conn = 1;
        } else if (o->failed) {
            api_error e;
            api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
            respond_error_as(s, j->fd, &e, j->anth, 0, NULL, 0);
            j->close_conn = 1;
        } else if (respond(s, j->fd, 200, "application/json", o->p, o->len, j->keep_alive, NULL)) {
            j->close_conn = 1;
        }
        j->status = 200;
        logf_("%s %s 200: prompt %zu tokens (%d cached) %.1f ms, %d generated %.1f ms, %s", j->peer, j->path,
              prompt_all, u.cached_tokens, u.prompt_ms, u.completion_tokens, u.predicted_ms, finish);
    }
    prompt_lps_free(&plp);
    sb_free(&echo);
    tok_ids_free(&forced);
    chat_parser_free(g.cp);
    reply_free(g.rp);
    anth_reply_free(g.ar);
    sb_free(&g.frame);
    free(g.top_ids);
    free(g.top_lps);
    free(g.alts);
}

/* Common prefix of a and b, in tokens. */
static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* A chat's next turn drops a few of the tokens its slot holds (the
 * answer's last tokens re-rendered: trimmed whitespace): a slot, or a
 * parked state, of which a job keeps all but this many (and most) holds
 * the job's conversation (the slot is not parked; the state moves out of the
 * cache). A parked state is restored only when it keeps at least this
 * many tokens more than the slot: fewer are not worth a copy of its
 * caches. */
#define PARK_SLACK 16

/* Whether a state of held tokens of which a job keeps keep is the job's
 * conversation: all but PARK_SLACK, and most, of it kept. */
static int holds(long keep, size_t held) { return held && keep + PARK_SLACK >= (long)held && 2 * keep >= (long)held; }

/* Hands queued jobs to free slots, oldest job first, each to the free slot
 * whose session holds the longest prefix of its (first) prompt, so that
 * slot evaluates the least; unless that prefix is less than half of what
 * the slot holds (a shared system prompt or a lone BOS): then to the free
 * slot used longest ago (an empty one first), so a conversation's cache
 * is not given up for a small gain. A slot still sending the end of its
 * answer (finishing) whose session matches better keeps the job waiting
 * for it. With a prompt cache, a slot that does not hold the job's
 * conversation is parked first, and a parked state that keeps more of the
 * prompt than the slot would is restored into it. Under the mutex. */
static void dispatch(server *s) {
    while (s->head) {
        job *j = s->head;
        const tok_ids *p = &j->prompts[0];
        slot *best = NULL, *lru = NULL;
        size_t best_len = 0, finishing_len = 0;
        for (int i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->finishing) { /* free within moments: a conversation's previous turn, usually */
                const size_t len = common_prefix(sl->held, sl->n_held, p->v, p->n);
                if (2 * len >= sl->n_held && len > finishing_len) finishing_len = len;
            }
            if (sl->assigned || !sl->sess) continue;
            const size_t len = common_prefix(sl->held, sl->n_held, p->v, p->n);
            if (!best || len > best_len) best = sl, best_len = len;
            if (!lru || sl->last_used < lru->last_used) lru = sl;
        }
        /* a client sends its next turn as soon as the last one's answer
         * ends, before that slot is free: it waits for its own slot */
        if (!best || finishing_len > best_len) return;
        if (best_len == 0 || 2 * best_len < best->n_held) best = lru;
        j->park = 0;
        j->unpark = NULL;
        if (s->pc) {
            /* the slot is free: its session is idle, and read here */
            const long keep = p->n ? gem_session_keeps(best->sess, p->v, p->n) : 0;
            if (!holds(keep, best->n_held)) {
                long kept = 0;
                if (j->req.cache_prompt)
                    j->unpark = pcache_take(s->pc, p->v, p->n, keep, PARK_SLACK, PARK_SLACK, &kept, &j->unpark_moved);
                j->park = best->n_held > 0;
            }
        }
        best->last_used = ++s->dispatched;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_waiting--;
        j->next = NULL;
        j->started = 1;
        best->assigned = j;
        pthread_cond_signal(&best->cv);
    }
}

/* The parked state a job continued is no longer needed there: freed when
 * it was moved out of the cache, else unpinned. */
static void unpark_done(server *s, job *j) {
    if (!j->unpark) return;
    if (j->unpark_moved) {
        gem_park_free(j->unpark);
    } else {
        pthread_mutex_lock(&s->mu);
        pcache_unpin(s->pc, j->unpark);
        pthread_mutex_unlock(&s->mu);
    }
    j->unpark = NULL;
}

/* Before a job: the slot's state into the prompt cache (dispatch's park),
 * then the parked state the job continues into the slot. Outside the
 * mutex: parking copies the caches. */
static void slot_swap(server *s, slot *sl, job *j) {
    if (j->park) {
        gem_err err = {{0}};
        gem_park *pk = gem_session_park(sl->sess, &err);
        if (pk) {
            pthread_mutex_lock(&s->mu);
            pcache_put(s->pc, pk);
            pthread_mutex_unlock(&s->mu);
        } else {
            logf_("slot %d: its state was not parked: %s", sl->id, err.msg);
        }
    }
    if (j->unpark) {
        gem_err err = {{0}};
        if (gem_session_unpark(sl->sess, j->unpark, &err)) logf_("slot %d: a parked state was not restored: %s", sl->id, err.msg);
        unpark_done(s, j);
    }
}

/* The slot's thread: runs the jobs dispatch gives it until the server stops. */
static void *slot_main(void *arg) {
    slot *sl = arg;
    server *s = sl->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->assigned && !atomic_load(&s->stop)) pthread_cond_wait(&sl->cv, &s->mu);
        job *j = sl->assigned;
        if (!j) break;
        sl->running = 1;
        pthread_mutex_unlock(&s->mu);
        if (atomic_load(&s->stop)) { /* shutting down: queued jobs are refused */
            api_error e;
            api_fail(&e, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
            if (!j->head_sent) respond_error_as(s, j->fd, &e, j->anth, 0, NULL, 0);
            j->close_conn = 1;
            j->status = 503;
        } else {
            slot_swap(s, sl, j);
            run_job(s, sl, j);
        }
        unpark_done(s, j); /* not restored (shutting down) */
        metrics_request(s->m, j->status);
        pthread_mutex_lock(&s->mu);
        slot_held(sl);
        sl->finishing = 0;
        sl->running = 0;
        sl->assigned = NULL;
        j->done = 1;
        pthread_cond_signal(&j->cond);
        dispatch(s);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Loads the model, makes the slots' sessions, then runs slot 0 itself and
 * the others on their own threads; returns once every slot has stopped. */
static void *worker_main(void *arg) {
    server *s = arg;
    gem_engine_opts eo = {0};
    eo.model_path = s->o.model_path;
    eo.backend = s->o.backend;
    eo.kv_type = s->o.kv_type;
    eo.n_ctx = s->o.n_ctx;
    eo.threads = s->o.threads;
    eo.shards = s->o.shards;
    eo.mtp_path = s->o.mtp_path;
    gem_err err = {{0}};
    double t0 = gem_now_s();
    const int n = s->o.parallel > 0 ? s->o.parallel : 1;
    eo.sessions = n; /* the capacity check counts every slot's caches */
    s->e = gem_engine_open(&eo, &err);
    slot *slots = s->e ? calloc((size_t)n, sizeof *slots) : NULL;
    if (s->e && !slots) gem_err_set(&err, "out of memory");
    int made = 0;
    for (; slots && made < n; made++) {
        slots[made].s = s;
        slots[made].id = made;
        pthread_cond_init(&slots[made].cv, NULL);
        if (!(slots[made].sess = gem_session_new(s->e, &err))) {
            gem_err_wrap(&err, "--parallel %d: session %d", n, made + 1);
            break;
        }
    }
    if (made < n) {
        for (int i = 0; slots && i <= made && i < n; i++) {
            gem_session_free(slots[i].sess);
            pthread_cond_destroy(&slots[i].cv);
        }
        free(slots);
        snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
        atomic_store(&s->failed, 1); /* the accept loop sees it and stops */
        return NULL;
    }
    /* the prompt cache's bound: as asked, or the default within half of
     * the memory available now (the entries are made as slots are parked) */
    size_t pc_limit = s->o.cache_ram_mib > 0 ? (size_t)s->o.cache_ram_mib << 20 : 0;
    if (s->o.cache_ram_mib < 0) {
        uint64_t avail;
        pc_limit = (size_t)SERVER_CACHE_RAM_MIB << 20;
        if (!sysmem_available(&avail) && avail / 2 < pc_limit) pc_limit = (size_t)(avail / 2);
    }
    pcache *pc = pc_limit ? pcache_new(pc_limit) : NULL;
    pthread_mutex_lock(&s->mu);
    s->slots = slots;
    s->n_slots = n;
    s->pc = pc;
    pthread_mutex_unlock(&s->mu);
    s->tk = gem_engine_tok(s->e);
    s->n_ctx = gem_engine_n_ctx(s->e);
    s->n_vocab = tok_n_vocab(s->tk);
    s->chat = gem_engine_chat_format(s->e);
    const chat_markers *mk = chat_format_markers(s->chat);
    s->thought_open = tok_find(s->tk, mk->reasoning_open, strlen(mk->reasoning_open));
    s->thought_close = tok_find(s->tk, mk->reasoning_close, strlen(mk->reasoning_close));
    for (int i = 1; i < n; i++)
        if (!pthread_create(&slots[i].th, NULL, slot_main, &slots[i])) slots[i].started = 1;
    /* ready before the line that says so: a client (the tests) that waits
     * for it must not be answered "loading" */
    atomic_store(&s->ready, 1);
    const size_t mem = gem_engine_mem_used(s->e);
    const gem_mem_plan *plan = gem_engine_plan(s->e);
    char memtxt[64] = "", kvb[32], pctxt[80] = "; prompt cache off";
    if (mem) snprintf(memtxt, sizeof memtxt, "; %.2f GiB of device memory", (double)mem / (1 << 30));
    if (pc) snprintf(pctxt, sizeof pctxt, "; prompt cache up to %zu MiB of host memory", pc_limit >> 20);
    logf_("%s on %s loaded in %.2f s; context %d tokens, KV caches %s per slot (--kv-type %s); %d slot%s%s%s",
          gem_engine_profile(s->e), gem_engine_backend(s->e), gem_now_s() - t0, s->n_ctx,
          gemma4_human_bytes(plan->state_bytes, kvb, sizeof kvb), plan->kv_type, n, n > 1 ? "s" : "",
          pctxt, memtxt);
    pthread_mutex_lock(&s->mu);
    dispatch(s); /* jobs that arrived while the slots were made */
    pthread_mutex_unlock(&s->mu);
    slot_main(&slots[0]);
    for (int i = 1; i < n; i++)
        if (slots[i].started) pthread_join(slots[i].th, NULL);
    return NULL;
}

/* ---- connection threads ---- */

/* A connection's phase, for eviction (conn_evict): waiting for a
 * request, receiving its head, its body, or being answered (never
 * evicted). */
enum { CONN_IDLE, CONN_HEAD, CONN_BODY, CONN_BUSY };

typedef struct conn {
    server *s;
    int fd;
    char peer[64];
    /* under the server's conn_mu */
    strbuf pre;    /* request bytes read before its thread started (probation), or empty */
    int place;     /* its index in conns, -1 once evicted (or never admitted) */
    int phase;
    double since;  /* when the phase began (a request's head and body: its first byte) */
    atomic_int evicted;
} conn;

/* Sets c's phase (since: when it began). */
static void conn_phase(conn *c, int phase, double since) {
    pthread_mutex_lock(&c->s->conn_mu);
    c->phase = phase;
    c->since = since;
    pthread_mutex_unlock(&c->s->conn_mu);
}

/* Slow clients must not lock others out (128 sockets sending a header byte
 * a second held every place for the whole read timeout, and /health
 * answered 503). When every place is taken, a new connection takes the place
 * of one that has sat idle, or received its request, for at least
 * EVICT_AGE seconds: the idle one idle longest, else the one whose request
 * began first (a client sending its request slowly). The victim is marked
 * and its reading side shut down, which wakes its thread: it answers 408
 * (a request in progress) and closes. Fresh connections are never taken:
 * a burst of ordinary requests completes its heads in milliseconds.
 * Returns the place for c, or -1 when every place is busy answering or too
 * young (conn_mu held). */
#define EVICT_AGE 1.0
static int conn_evict(server *s, double now) {
    int best = -1;
    for (int i = 0; i < s->o.max_conns; i++) { /* every place is taken (conn_admit looked, under conn_mu) */
        const conn *v = s->conns[i];
        if (v->phase == CONN_BUSY || now - v->since < EVICT_AGE) continue;
        const conn *b = best >= 0 ? s->conns[best] : NULL;
        if (!b || (v->phase == CONN_IDLE) > (b->phase == CONN_IDLE) ||
            ((v->phase == CONN_IDLE) == (b->phase == CONN_IDLE) && v->since < b->since))
            best = i;
    }
    if (best < 0) return -1;
    conn *v = s->conns[best];
    atomic_store(&v->evicted, 1);
    v->place = -1;
    s->conns[best] = NULL;
    shutdown(v->fd, SHUT_RD); /* its fd stays open until its thread, which no longer holds a place, closes it */
    logf_("%s evicted: %s for %.1f s while all %d connections (--max-conns) were open", v->peer,
          v->phase == CONN_IDLE ? "idle" : "receiving its request", now - v->since, s->o.max_conns);
    return best;
}

/* A place for c (the accept loop): a free one, or with evict an evicted
 * one's. 0, or -1 when none can be had. */
static int conn_admit(server *s, conn *c, int evict) {
    pthread_mutex_lock(&s->conn_mu);
    int place = -1;
    for (int i = 0; i < s->o.max_conns && place < 0; i++)
        if (!s->conns[i]) place = i;
    if (place < 0 && evict) place = conn_evict(s, gem_now_s());
    if (place >= 0) {
        s->conns[place] = c;
        c->place = place;
        c->phase = CONN_IDLE;
        c->since = gem_now_s();
    }
    pthread_mutex_unlock(&s->conn_mu);
    return place < 0 ? -1 : 0;
}

/* Gives c's place back (unless it was evicted). Before its fd closes:
 * conn_evict touches only the fds of connections in conns. */
static void conn_leave(conn *c) {
    pthread_mutex_lock(&c->s->conn_mu);
    if (c->place >= 0) c->s->conns[c->place] = NULL;
    c->place = -1;
    pthread_mutex_unlock(&c->s->conn_mu);
}

static int path_is(const http_req *r, const char *p) {
    size_t n = strlen(p);
    return r->path_len == n && !memcmp(r->target, p, n);
}

/* The Anthropic routes: /v1/messages and everything below it. */
static int anth_route(const http_req *r) {
    return path_is(r, "/v1/messages") || (r->path_len > 13 && !memcmp(r->target, "/v1/messages/", 13));
}

/* v[0..n) is the key, compared in constant time in the key */
static int key_is(const char *v, size_t n, const char *key) {
    size_t kl = strlen(key);
    if (!v || n != kl) return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(v[i] ^ key[i]);
    return diff == 0;
}

/* The key as OpenAI clients send it (Authorization: Bearer KEY) or as
 * Anthropic's do (x-api-key: KEY), on every route. */
static int authorized(const server *s, const http_req *r) {
    if (!s->o.api_key) return 1;
    size_t n;
    const char *v = http_header_get(r, "Authorization", &n);
    if (v && n >= 7 && !strncasecmp(v, "Bearer ", 7) && key_is(v + 7, n - 7, s->o.api_key)) return 1;
    v = http_header_get(r, "x-api-key", &n);
    return key_is(v, n, s->o.api_key);
}

/* Routes that answer without the API key: the CORS preflight and health
 * (handle() serves them before its key check). */
static int key_exempt(const http_req *r) {
    return !strcmp(r->method, "OPTIONS") || path_is(r, "/health") || path_is(r, "/v1/health");
}

/* The 401 of a request without a valid key; nonzero when sending failed. */
static int respond_no_key_as(server *s, int fd, int anth, int keep, int head_only) {
    api_error e;
    if (anth) {
        api_fail(&e, 401, "authentication_error", NULL, NULL,
                 "invalid or missing API key: send the header 'x-api-key: KEY'");
        return respond_error_as(s, fd, &e, 1, keep, NULL, head_only);
    }
    /* OpenAI's body for a bad key: type invalid_request_error, code
     * invalid_api_key (clients branch on the code) */
    api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
             "invalid or missing API key: send the header 'Authorization: Bearer KEY'");
    return respond_error_h(s, fd, &e, keep, "WWW-Authenticate: Bearer\r\n", head_only);
}
static int respond_no_key(server *s, int fd, int keep, int head_only) {
    return respond_no_key_as(s, fd, 0, keep, head_only);
}

static int not_ready(server *s, int fd, int keep, int head_only) {
    api_error e;
    api_fail(&e, 503, "unavailable_error", NULL, NULL, "the model is loading");
    return respond_error_h(s, fd, &e, keep, "Retry-After: 1\r\n", head_only);
}

static void model_json(server *s, strbuf *b) {
    sb_puts(b, "{\"id\":");
    json_quote(s->alias, strlen(s->alias), b);
    sb_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"gem\"", s->started);
    if (atomic_load(&s->ready))
        sb_printf(b, ",\"meta\":{\"profile\":\"%s\",\"backend\":\"%s\",\"n_ctx\":%d,\"n_vocab\":%u}",
                  gem_engine_profile(s->e), gem_engine_backend(s->e), s->n_ctx, s->n_vocab);
    sb_putc(b, '}');
}

static void models_json(server *s, strbuf *b) {
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    model_json(s, b);
    sb_puts(b, "]}");
}

static void props_json(server *s, strbuf *b) {
    sb_printf(b,
              "{\"default_generation_settings\":{\"n_ctx\":%d,\"params\":{\"temperature\":0.8,\"top_k\":64,"
              "\"top_p\":0.95,\"min_p\":0,\"repeat_penalty\":1,\"repeat_last_n\":64,\"presence_penalty\":0,"
              "\"frequency_penalty\":0,\"n_predict\":-1,\"seed\":-1,\"stream\":false}},"
              "\"total_slots\":%d,\"model_alias\":",
              s->n_ctx, s->n_slots);
    json_quote(s->alias, strlen(s->alias), b);
    sb_puts(b, ",\"model_path\":");
    json_quote(s->o.model_path, strlen(s->o.model_path), b);
    sb_puts(b, ",\"modalities\":{\"vision\":false,\"video\":false,\"audio\":false},\"chat_template\":");
    const char *tpl = s->o.chat_template ? s->o.chat_template : "";
    json_quote(tpl, strlen(tpl), b);
    sb_puts(b,
            ",\"chat_template_caps\":{\"supports_object_arguments\":true,\"supports_parallel_tool_calls\":true,"
            "\"supports_string_content\":true,\"supports_system_role\":true,\"supports_tool_calls\":true,"
            "\"supports_tools\":true,\"supports_typed_content\":true},\"bos_token\":");
    /* the vocabulary's own texts (Gemma 4: <bos>, <eos>; a Qwen3.5 file may have no BOS: null) */
    for (int k = 0; k < 2; k++) {
        size_t tl;
        const char *tt = tok_text(s->tk, k ? tok_eos(s->tk) : tok_bos(s->tk), &tl);
        if (tt) json_quote(tt, tl, b);
        else sb_puts(b, "null");
        sb_puts(b, k ? ",\"build_info\":" : ",\"eos_token\":");
    }
    json_quote(s->o.version, strlen(s->o.version), b);
    sb_printf(b, ",\"backend\":\"%s\",\"profile\":\"%s\",\"is_sleeping\":false,\"prompt_cache\":",
              gem_engine_backend(s->e), gem_engine_profile(s->e));
    /* the prompt cache (--cache-ram): its bound, what it holds, hits and misses; null when off */
    pthread_mutex_lock(&s->mu);
    if (s->pc) {
        pcache_stats ps;
        pcache_get_stats(s->pc, &ps);
        sb_printf(b,
                  "{\"limit_bytes\":%zu,\"bytes\":%zu,\"entries\":%ld,\"hits\":%llu,\"misses\":%llu,"
                  "\"evicted\":%llu}",
                  ps.limit, ps.bytes, ps.entries, ps.hits, ps.misses, ps.evicted);
    } else {
        sb_puts(b, "null");
    }
    pthread_mutex_unlock(&s->mu);
    sb_puts(b, ",\"mtp\":");
    /* the drafter: its file and profile, or null */
    if (gem_engine_mtp(s->e)) {
        sb_puts(b, "{\"draft_model\":");
        json_quote(s->o.mtp_path, strlen(s->o.mtp_path), b);
        sb_printf(b, ",\"profile\":\"%s\"}}", gem_engine_mtp(s->e));
    } else {
        sb_puts(b, "null}");
    }
}

static int handle_tokenize(server *s, int fd, const http_req *r, int keep) {
    api_tokenize t;
    api_error e;
    if (api_parse_tokenize(r->body, r->content_length, &t, &e)) {
        json_free(t.root);
        return respond_error(s, fd, &e, keep, NULL);
    }
    tok_ids ids = {0};
    strbuf b = {0};
    if (tok_encode(s->tk, t.content, t.content_len, t.add_special, t.parse_special, &ids)) b.failed = 1;
    sb_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < ids.n; i++) {
        if (i) sb_putc(&b, ',');
        if (!t.with_pieces) {
            sb_printf(&b, "%d", ids.v[i]);
            continue;
        }
        size_t pl;
        const char *p = tok_piece(s->tk, ids.v[i], 1, &pl);
        strbuf clean = {0};
        utf8_sanitize(p, pl, &clean);
        sb_printf(&b, "{\"id\":%d,\"piece\":", ids.v[i]);
        json_quote(sb_cstr(&clean), clean.len, &b);
        sb_putc(&b, '}');
        sb_free(&clean);
    }
    sb_puts(&b, "]}");
    int rc = respond_json(s, fd, 200, &b, keep, NULL);
    sb_free(&b);
    tok_ids_free(&ids);
    json_free(t.root);
    return rc;
}

static int handle_detokenize(server *s, int fd, const http_req *r, int keep) {
    int32_t *ids;
    size_t n;
    api_error e;
    const api_opts ao = {0, s->n_vocab, s->n_ctx, s->chat};
    if (api_parse_detokenize(r->body, r->content_length, &ao, &ids, &n, &e))
        return respond_error(s, fd, &e, keep, NULL);
    strbuf text = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = tok_piece(s->tk, ids[i], 0, &pl);
        sb_put(&text, p, pl);
    }
    sb_puts(&b, "{\"content\":");
    strbuf clean = {0};
    utf8_sanitize(text.p ? text.p : "", text.len, &clean);
    json_quote(sb_cstr(&clean), clean.len, &b);
    sb_putc(&b, '}');
    int rc = respond_json(s, fd, 200, &b, keep, NULL);
    sb_free(&clean);
    sb_free(&text);
    sb_free(&b);
    free(ids);
    return rc;
}

/* Removes a job that has not started from the queue (server mutex held). */
static void unqueue(server *s, job *j) {
    job **p = &s->head, *prev = NULL;
    while (*p && *p != j) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return;
    *p = j->next;
    if (s->tail == j) s->tail = prev;
    s->n_waiting--;
}

/* Waits for a queued job (server mutex held). While it has not started, a
 * client that leaves takes its job out of the queue, and a streaming
 * client gets the SSE head and ": queued" comments every heartbeat. These
 * sends never block (the mutex is held): a full socket skips a comment, a
 * partial write gives the connection up. */
static void wait_job(conn *c, job *j) {
    server *s = c->s;
    double last = gem_now_s();
    while (!j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cond, &s->mu, &ts);
        if (j->done || j->started) continue;
        int gone = client_gone(c->fd);
        if (!gone && j->req.stream && gem_now_s() - last >= s->o.heartbeat) {
            strbuf out = {0}, x = {0};
            if (!j->head_sent) {
                extra_headers(s, &x);
                sb_puts(&x, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
                http_head(&out, 200, "text/event-stream", j->http10 ? -2 : -1, j->keep_alive, x.p);
            }
            stream_frame(j, &out, ": queued\n\n", 10);
            ssize_t k = out.failed ? -1 : send(c->fd, out.p, out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0 && (size_t)k < out.len) gone = 1;
            else if (k > 0) j->head_sent = 1;
            else if (!(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) gone = 1;
            sb_free(&out);
            sb_free(&x);
            last = gem_now_s();
        }
        if (gone) {
            unqueue(s, j);
            j->done = 1;
            j->close_conn = 1;
            metrics_request(s->m, 499);
            logf_("%s %s cancelled: the client left while queued", j->peer, j->path);
        }
    }
}

/* A prompt text that cannot fit the context whatever its tokens (more of
 * them than tok_min_tokens' lower bound): the 400 in e, 1. Checked before
 * encoding, whose scratch grows with the text. */
static int too_long(server *s, const char *text, size_t len, const char *param, const char *what, api_error *e) {
    const size_t least = tok_min_tokens(s->tk, text, len);
    if (least < (size_t)s->n_ctx) return 0;
    api_fail(e, 400, "invalid_request_error", param, "context_length_exceeded",
             "%s has at least %zu tokens; the context holds %d (start the server with a larger --ctx)", what, least,
             s->n_ctx);
    return 1;
}

/* Validates, renders and tokenizes; queues the job and waits for it.
 * Returns 1 to keep the connection, 0 to close it. */
static int handle_generate(conn *c, const http_req *r, api_kind kind, int keep) {
    server *s = c->s;
    const int anth = anth_route(r); /* POST /v1/messages: a chat in Anthropic's terms */
    if (!atomic_load(&s->ready)) return not_ready(s, c->fd, keep, 0) ? 0 : keep;
    job *j = calloc(1, sizeof *j);
    api_error e = {0};
    api_opts ao = {s->o.test_hooks, s->n_vocab, s->n_ctx, s->chat};
    strbuf prompt = {0};
    int ok = 0;
    if (!j) {
        api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (anth ? anth_parse(r->body, r->content_length, &ao, 0, &j->req, &e)
             : api_parse(kind, r->body, r->content_length, &ao, &j->req, &e))
        goto fail;
    if (api_grammar(&j->req, &j->grammar, &e)) goto fail;
    j->n_prompts = kind == API_CHAT ? 1 : j->req.n_prompts;
    if (!(j->prompts = calloc(j->n_prompts, sizeof *j->prompts))) {
        api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    for (size_t p = 0; p < j->n_prompts; p++) {
        tok_ids *ids = &j->prompts[p];
        char name[32] = "prompt"; /* a list's prompts are named by their index */
        if (j->n_prompts > 1) snprintf(name, sizeof name, "prompt[%zu]", p);
        if (kind == API_CHAT) {
            if (api_render(&j->req, &prompt, &e)) goto fail;
            if (too_long(s, prompt.p, prompt.len, "messages", "the prompt", &e)) goto fail;
            if (prompt.failed || tok_encode(s->tk, prompt.p, prompt.len, 0, 1, ids)) {
                api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
                goto fail;
            }
        } else if (j->req.prompts[p].ids) {
            api_prompt *ap = &j->req.prompts[p];
            for (size_t i = 0; i < ap->n_ids; i++)
                if ((uint32_t)ap->ids[i] >= s->n_vocab) {
                    api_fail(&e, 400, "invalid_request_error", "prompt", NULL, "'%s[%zu]' is not a token id below %u",
                             name, i, s->n_vocab);
                    goto fail;
                }
            ids->v = malloc(ap->n_ids * sizeof *ids->v);
            if (!ids->v) {
                api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
                goto fail;
            }
            memcpy(ids->v, ap->ids, ap->n_ids * sizeof *ids->v); /* the request keeps its own (an echo's text) */
            ids->n = ids->cap = ap->n_ids;
        } else if (too_long(s, j->req.prompts[p].text, j->req.prompts[p].len, "prompt",
                            j->n_prompts > 1 ? name : "the prompt", &e)) {
            goto fail;
        } else if (tok_encode(s->tk, j->req.prompts[p].text, j->req.prompts[p].len, 1, 1, ids)) {
            api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        if (!ids->n) {
            api_fail(&e, 400, "invalid_request_error", "prompt", NULL, "the prompt is empty");
            goto fail;
        }
        if (ids->n >= (size_t)s->n_ctx) {
            api_fail(&e, 400, "invalid_request_error", kind == API_CHAT ? "messages" : "prompt",
                     "context_length_exceeded",
                     "%s has %zu tokens; the context holds %d (start the server with a larger --ctx)",
                     j->n_prompts > 1 ? name : "the prompt", ids->n, s->n_ctx);
            goto fail;
        }
    }
    j->s = s;
    j->fd = c->fd;
    j->anth = anth;
    j->http10 = r->minor == 0;
    j->keep_alive = keep && !(j->http10 && j->req.stream);
    snprintf(j->peer, sizeof j->peer, "%s", c->peer);
    snprintf(j->path, sizeof j->path, "%.*s", (int)(r->path_len < 60 ? r->path_len : 60), r->target);
    pthread_cond_init(&j->cond, NULL);
    pthread_mutex_lock(&s->mu);
    if (s->n_waiting >= s->o.queue) {
        int waiting = s->n_waiting;
        pthread_mutex_unlock(&s->mu);
        api_fail(&e, 503, "unavailable_error", NULL, "server_busy",
                 "the server is busy (%d requests are waiting); retry later", waiting);
        pthread_cond_destroy(&j->cond);
        logf_("%s %s 503: queue full", c->peer, j->path);
        goto fail;
    }
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_waiting++;
    dispatch(s);
    wait_job(c, j);
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&j->cond);
    ok = j->keep_alive && !j->close_conn;
    goto out;
fail:
    metrics_request(s->m, e.status);
    ok = respond_error_as(s, c->fd, &e, anth, keep, e.status == 503 ? "Retry-After: 1\r\n" : NULL, 0) ? 0 : keep;
    if (e.status != 503) logf_("%s %.*s %d: %s", c->peer, (int)(r->path_len < 60 ? r->path_len : 60), r->target,
                               e.status, e.message);
out:
    if (j) {
        api_request_free(&j->req);
        for (size_t p = 0; p < j->n_prompts; p++) tok_ids_free(&j->prompts[p]);
        free(j->prompts);
        gram_free(j->grammar);
        free(j);
    }
    sb_free(&prompt);
    return ok;
}

/* Browser drive-by guards (a web page can send a loopback server "simple"
 * requests: text/plain or form bodies without a CORS preflight, and reach
 * it under a name of its own through DNS rebinding):
 *
 * POST bodies must be declared application/json (parameters such as a
 * charset allowed), so a simple request never starts a generation.
 *
 * On a loopback bind (the address bound, not --host's spelling) the Host
 * header must name the machine: localhost, a loopback address, the bound
 * host, or a name in --allow-host, with any port; a request without Host
 * (HTTP/1.0: http_parse refuses an HTTP/1.1 one) is let through. */
static int json_body(const http_req *r) {
    size_t n;
    const char *v = http_header_get(r, "Content-Type", &n);
    if (!v) return 0;
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    size_t m = 0;
    while (m < n && v[m] != ';' && v[m] != ' ' && v[m] != '\t') m++;
    return m == 16 && !strncasecmp(v, "application/json", 16);
}

/* A POST route's body that is not declared JSON: the 415 sent, 1 (the
 * caller returns the connection's fate through *ret); 0 when it is JSON. */
static int refuse_non_json(server *s, int fd, const http_req *r, int keep, int *ret) {
    if (json_body(r)) return 0;
    api_error e;
    size_t n;
    const char *t = http_header_get(r, "Content-Type", &n);
    if (t)
        api_fail(&e, 415, "invalid_request_error", NULL, "unsupported_media_type",
                 "a POST body must be sent with 'Content-Type: application/json', not '%.*s'", (int)(n < 200 ? n : 200),
                 t);
    else
        api_fail(&e, 415, "invalid_request_error", NULL, "unsupported_media_type",
                 "a POST body must be sent with 'Content-Type: application/json' (the header is missing)");
    *ret = respond_error_as(s, fd, &e, anth_route(r), keep, NULL, 0) ? 0 : keep;
    return 1;
}

/* localhost, [::1] or a dotted-decimal 127.x address (digits and dots
 * only: a name such as 127.0.0.1.example.com is not one) */
static int is_loopback_name(const char *h, size_t n) {
    if ((n == 9 && !strncasecmp(h, "localhost", 9)) || (n == 5 && !memcmp(h, "[::1]", 5))) return 1;
    if (n < 5 || memcmp(h, "127.", 4)) return 0;
    for (size_t i = 4; i < n; i++)
        if ((h[i] < '0' || h[i] > '9') && h[i] != '.') return 0;
    return 1;
}

/* h[0..n) one of the comma-separated names of list (case-insensitive) */
static int in_list(const char *list, const char *h, size_t n) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncasecmp(p, h, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static int host_allowed(const server *s, const http_req *r) {
    if (!s->loopback) return 1;
    size_t n;
    const char *h = http_header_get(r, "Host", &n);
    if (!h) return 1;
    /* drop the port: after the last ':' of a name, after ']' of an IPv6 literal */
    size_t name = n;
    if (n && h[0] == '[') {
        const char *close = memchr(h, ']', n);
        if (close) name = (size_t)(close - h) + 1;
    } else {
        const char *colon = memchr(h, ':', n);
        if (colon) name = (size_t)(colon - h);
    }
    if (name == n || (name < n && h[name] == ':')) {
        for (size_t i = name + 1; i < n; i++)
            if (h[i] < '0' || h[i] > '9') return 0;
    } else {
        return 0;
    }
    return is_loopback_name(h, name) || (strlen(s->o.host) == name && !strncasecmp(s->o.host, h, name)) ||
           in_list(s->o.allow_host, h, name);
}

/* POST /v1/messages/count_tokens: the tokens of the prompt /v1/messages
 * would render from the same body. Nonzero when sending failed. */
static int handle_count_tokens(server *s, int fd, const http_req *r, int keep) {
    api_request rq;
    api_error e;
    api_opts ao = {s->o.test_hooks, s->n_vocab, s->n_ctx, s->chat};
    strbuf prompt = {0}, b = {0};
    tok_ids ids = {0};
    int rc;
    if (anth_parse(r->body, r->content_length, &ao, 1, &rq, &e) || api_render(&rq, &prompt, &e)) {
        rc = respond_error_as(s, fd, &e, 1, keep, NULL, 0);
    } else {
        if (prompt.failed || tok_encode(s->tk, prompt.p, prompt.len, 0, 1, &ids)) b.failed = 1;
        sb_printf(&b, "{\"input_tokens\":%zu}", ids.n);
        rc = respond_json(s, fd, 200, &b, keep, NULL);
    }
    api_request_free(&rq);
    tok_ids_free(&ids);
    sb_free(&prompt);
    sb_free(&b);
    return rc;
}

/* The Anthropic routes (anth_route): every answer in Anthropic's shape,
 * the key from x-api-key or Authorization. */
static int handle_anthropic(conn *c, const http_req *r, int keep, int head) {
    server *s = c->s;
    api_error e;
    int rc;
    const int count = path_is(r, "/v1/messages/count_tokens");
    if (!authorized(s, r)) return respond_no_key_as(s, c->fd, 1, keep, head) ? 0 : keep;
    if (!count && !path_is(r, "/v1/messages"))
        api_fail(&e, 404, "not_found_error", NULL, NULL, "no route %.*s %.*s", (int)strlen(r->method), r->method,
                 (int)(r->path_len < 200 ? r->path_len : 200), r->target);
    else if (strcmp(r->method, "POST"))
        api_fail(&e, 405, "invalid_request_error", NULL, NULL, "method %s is not allowed on %.*s", r->method,
                 (int)r->path_len, r->target);
    else if (refuse_non_json(s, c->fd, r, keep, &rc))
        return rc;
    else if (!atomic_load(&s->ready))
        api_fail(&e, 503, "overloaded_error", NULL, NULL, "the model is loading");
    else if (count)
        return handle_count_tokens(s, c->fd, r, keep) ? 0 : keep;
    else
        return handle_generate(c, r, API_CHAT, keep);
    return respond_error_as(s, c->fd, &e, 1, keep, e.status == 503 ? "Retry-After: 1\r\n" : NULL, head) ? 0 : keep;
}

/* Answers one complete request; 1 to keep the connection open. */
static int handle(conn *c, const http_req *r) {
    server *s = c->s;
    int fd = c->fd, keep = r->keep_alive && !atomic_load(&s->stop);
    /* HEAD: answered as GET, the head only */
    const int head = !strcmp(r->method, "HEAD");
    int get = head || !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    api_error e;
    strbuf b = {0};
    int rc;
    if (!host_allowed(s, r)) {
        size_t n;
        const char *h = http_header_get(r, "Host", &n);
        api_fail(&e, 403, "invalid_request_error", NULL, "host_not_allowed",
                 "Host '%.*s' is not allowed on a server bound to %s (a guard against DNS rebinding); start gem serve "
                 "with --allow-host NAME to accept it",
                 (int)(n < 200 ? n : 200), h ? h : "", s->o.host);
        return respond_error_h(s, fd, &e, keep, NULL, head) ? 0 : keep;
    }
    if (!strcmp(r->method, "OPTIONS")) { /* CORS preflight: no authentication */
        strbuf x = {0};
        extra_headers(s, &x);
        sb_puts(&x, "Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS\r\n"
                    "Access-Control-Allow-Headers: Authorization, Content-Type\r\nAccess-Control-Max-Age: 86400\r\n");
        strbuf out = {0};
        http_head(&out, 204, NULL, 0, keep, x.p);
        rc = out.failed ? -1 : send_all(fd, out.p, out.len);
        sb_free(&out);
        sb_free(&x);
        return rc ? 0 : keep;
    }
    if (path_is(r, "/health") || path_is(r, "/v1/health")) {
        if (!get) goto method;
        if (!atomic_load(&s->ready)) return not_ready(s, fd, keep, head) ? 0 : keep;
        sb_puts(&b, "{\"status\":\"ok\"}");
        goto send;
    }
    if (anth_route(r)) return handle_anthropic(c, r, keep, head);
    if (!authorized(s, r)) return respond_no_key(s, fd, keep, head) ? 0 : keep;
    if (path_is(r, "/v1/models") || path_is(r, "/models")) {
        if (!get) goto method;
        models_json(s, &b);
        goto send;
    }
    if (r->path_len > 11 && !memcmp(r->target, "/v1/models/", 11)) {
        if (!get) goto method;
        size_t n = r->path_len - 11;
        if (n != strlen(s->alias) || memcmp(r->target + 11, s->alias, n)) {
            api_fail(&e, 404, "invalid_request_error", "model", "model_not_found", "the model '%.*s' does not exist",
                     (int)(n < 200 ? n : 200), r->target + 11);
            return respond_error_h(s, fd, &e, keep, NULL, head) ? 0 : keep;
        }
        model_json(s, &b);
        goto send;
    }
    if (path_is(r, "/metrics")) {
        if (!get) goto method;
        pthread_mutex_lock(&s->mu);
        const int ready = atomic_load(&s->ready); /* n_ctx and the engine are the loader's until then */
        metrics_now now = {0, s->n_waiting, atomic_load(&s->n_conns), 0, ready ? s->n_ctx : 0,
                           ready && gem_engine_mtp(s->e) != NULL, s->n_slots, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < s->n_slots; i++) {
            now.running += s->slots[i].running;
            now.session_tokens += (long)s->slots[i].n_held;
        }
        if (s->pc) {
            pcache_stats ps;
            pcache_get_stats(s->pc, &ps);
            now.pcache = 1;
            now.pc_limit = ps.limit;
            now.pc_bytes = ps.bytes;
            now.pc_entries = ps.entries;
            now.pc_hits = ps.hits;
            now.pc_misses = ps.misses;
            now.pc_evicted = ps.evicted;
        }
        pthread_mutex_unlock(&s->mu);
        if (ready) {
            int rmax;
            gem_engine_batch_stats(s->e, &now.batched_steps, &now.batched_rows, &rmax);
        }
        metrics_render(s->m, &now, &b);
        rc = b.failed ? -1 : respond_h(s, fd, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len, keep, NULL, head);
        sb_free(&b);
        return rc ? 0 : keep;
    }
    if (path_is(r, "/slots")) { /* llama-server's shape, one entry per session */
        if (!get) goto method;
        if (!atomic_load(&s->ready)) return not_ready(s, fd, keep, head) ? 0 : keep;
        sb_putc(&b, '[');
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < s->n_slots; i++) {
            sb_printf(&b, "%s{\"id\":%d,\"n_ctx\":%d,\"is_processing\":%s,\"n_cached_tokens\":%zu,\"model\":",
                      i ? "," : "", i, s->n_ctx, s->slots[i].running ? "true" : "false", s->slots[i].n_held);
            json_quote(s->alias, strlen(s->alias), &b);
            sb_putc(&b, '}');
        }
        pthread_mutex_unlock(&s->mu);
        sb_putc(&b, ']');
        goto send;
    }
    if (path_is(r, "/props")) {
        if (!get) goto method;
        if (!atomic_load(&s->ready)) return not_ready(s, fd, keep, head) ? 0 : keep;
        props_json(s, &b);
        goto send;
    }
    if (path_is(r, "/v1/chat/completions") || path_is(r, "/chat/completions")) {
        if (!post) goto method;
        if (refuse_non_json(s, fd, r, keep, &rc)) return rc;
        return handle_generate(c, r, API_CHAT, keep);
    }
    if (path_is(r, "/v1/completions") || path_is(r, "/completions")) {
        if (!post) goto method;
        if (refuse_non_json(s, fd, r, keep, &rc)) return rc;
        return handle_generate(c, r, API_COMPLETION, keep);
    }
    if (path_is(r, "/tokenize") || path_is(r, "/detokenize")) {
        if (!post) goto method;
        if (refuse_non_json(s, fd, r, keep, &rc)) return rc;
        if (!atomic_load(&s->ready)) return not_ready(s, fd, keep, head) ? 0 : keep;
        if (path_is(r, "/tokenize")) return handle_tokenize(s, fd, r, keep) ? 0 : keep;
        return handle_detokenize(s, fd, r, keep) ? 0 : keep;
    }
    api_fail(&e, 404, "not_found_error", NULL, NULL, "no route %.*s %.*s", (int)strlen(r->method), r->method,
             (int)(r->path_len < 200 ? r->path_len : 200), r->target);
    return respond_error_h(s, fd, &e, keep, NULL, head) ? 0 : keep;
method:
    api_fail(&e, 405, "invalid_request_error", NULL, NULL, "method %s is not allowed on %.*s", r->method,
             (int)(r->path_len < 200 ? r->path_len : 200), r->target);
    return respond_error_h(s, fd, &e, keep, NULL, head) ? 0 : keep;
send:
    rc = respond_json_h(s, fd, 200, &b, keep, NULL, head);
    sb_free(&b);
    return rc ? 0 : keep;
}

/* Reads and drops up to n bytes the client is still sending, until it stops
 * or `seconds` pass: a client that writes its whole body before reading
 * (most do, without Expect: 100-continue) then reads the answer sent early
 * instead of failing with a broken pipe. Nothing is buffered. */
static void discard_input(int fd, size_t n, double seconds) {
    char buf[16384];
    const double end = gem_now_s() + seconds;
    while (n > 0) {
        const double left = end - gem_now_s();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        ssize_t k = recv(fd, buf, n < sizeof buf ? n : sizeof buf, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) break;
        n -= (size_t)k;
    }
}

/* Closes after the client has read our answer: half-closes, then discards
 * what the client still sends (briefly), so a refused request body does not
 * turn the close into a reset that destroys the error response. */
static void linger_close(int fd) {
    shutdown(fd, SHUT_WR);
    char buf[4096];
    double end = gem_now_s() + 1.0;
    size_t drained = 0;
    while (drained < (1 << 20)) {
        double left = end - gem_now_s();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k <= 0) break;
        drained += (size_t)k;
    }
    close(fd);
}

/* ---- the in-flight budget (--max-inflight) ----
 *
 * A request's body is charged from the moment its head is complete until
 * the request is answered (the body and what was parsed from it live that
 * long, a queued job's included). Parsing keeps what a body can become
 * near its size (api_parse_body's value bound, packed token ids, prompts
 * refused by length before they are encoded), so the budget bounds the
 * memory all requests take together. */

/* Raises a request's charge (*held bytes so far) to want: 0, or -1 when
 * the budget cannot take the difference. Bodies up to SERVER_FREE_BODY
 * are free. */
static int budget_charge(server *s, size_t *held, size_t want) {
    if (want <= SERVER_FREE_BODY || want <= *held) return 0;
    size_t add = want - *held, cur = atomic_load(&s->inflight);
    do {
        if (cur + add > s->o.max_inflight) return -1;
    } while (!atomic_compare_exchange_weak(&s->inflight, &cur, cur + add));
    *held = want;
    return 0;
}

static void budget_release(server *s, size_t *held) {
    if (*held) atomic_fetch_sub(&s->inflight, *held);
    *held = 0;
}

static void *conn_main(void *arg) {
    conn *c = arg;
    server *s = c->s;
    http_limits lim = {MAX_HEAD, s->o.max_body};
    strbuf in = c->pre, body = {0};
    memset(&c->pre, 0, sizeof c->pre);
    char buf[16384];
    size_t charged = 0; /* the current request's bytes of the in-flight budget */
    /* the head's deadline, within the whole request's */
    const double head_limit = s->o.header_timeout < s->o.read_timeout ? s->o.header_timeout : s->o.read_timeout;
    for (long served = 0;; served++) {
        http_req r;
        int st, sent_continue = 0;
        double start = gem_now_s(), first = in.len ? start : 0;
        http_dechunk dc = {0};
        size_t fed = 0; /* chunked body bytes consumed after the head */
        body.len = 0;
        conn_phase(c, first ? CONN_HEAD : CONN_IDLE, start);
        for (;;) {
            st = http_parse(in.p, in.len, &lim, &r);
            if (st == HTTP_HEAD && r.chunked) {
                size_t used;
                int cst = 0;
                const char *why = NULL;
                int dr = http_dechunk_feed(&dc, in.p + r.head_len + fed, in.len - r.head_len - fed, s->o.max_body,
                                           &body, &used, &cst, &why);
                fed += used;
                if (dr == HTTP_DONE) {
                    r.body = body.p ? body.p : "";
                    r.content_length = body.len;
                    r.total_len = r.head_len + fed;
                    st = HTTP_DONE;
                } else if (dr == HTTP_ERROR) {
                    r.status = cst;
                    r.error = why;
                    st = HTTP_ERROR;
                }
            }
            if (st == HTTP_ERROR) break;
            /* the body, charged once the head is complete: by its length,
             * or a chunked one by what it holds so far (raw and decoded);
             * one the budget cannot take is refused unread (a request
             * without its key gets its 401 instead) */
            const size_t want = st == HTTP_PARTIAL ? 0 : r.chunked ? in.len - r.head_len + body.len : r.content_length;
            if (want && (key_exempt(&r) || authorized(s, &r)) && budget_charge(s, &charged, want)) {
                api_error e;
                api_fail(&e, 503, "unavailable_error", NULL, "server_busy",
                         "the server holds %zu bytes of request bodies; this one's %zu would pass --max-inflight "
                         "%zu; retry later",
                         atomic_load(&s->inflight), want, s->o.max_inflight);
                respond_error_as(s, c->fd, &e, anth_route(&r), 0, "Retry-After: 1\r\n", 0);
                logf_("%s 503: a body of %zu bytes would pass --max-inflight (%zu bytes held)", c->peer, want,
                      atomic_load(&s->inflight));
                if (st == HTTP_HEAD) {
                    const size_t have = in.len - r.head_len;
                    discard_input(c->fd, r.chunked ? s->o.max_body : r.content_length - have, s->o.read_timeout);
                }
                goto out;
            }
            if (st == HTTP_DONE) break;
            if (st == HTTP_HEAD && c->phase == CONN_HEAD) conn_phase(c, CONN_BODY, first);
            /* a request that will be refused for its key is refused on its
             * head: reading (and buffering) up to max_body first, and a
             * 100 Continue, would serve anyone without the key */
            if (st == HTTP_HEAD && !key_exempt(&r) && !authorized(s, &r)) {
                respond_no_key_as(s, c->fd, anth_route(&r), 0, !strcmp(r.method, "HEAD"));
                logf_("%s 401: no valid API key (refused on the head, body not read)", c->peer);
                /* the rest of the announced body (any chunked one up to max_body), dropped unread */
                const size_t have = in.len - r.head_len;
                discard_input(c->fd, r.chunked ? s->o.max_body : r.content_length > have ? r.content_length - have : 0,
                              s->o.read_timeout);
                goto out;
            }
            if (st == HTTP_HEAD && r.expect_continue && !sent_continue) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (send_all(c->fd, cont, sizeof cont - 1)) goto out;
                sent_continue = 1;
            }
            double t = gem_now_s();
            if (atomic_load(&c->evicted)) { /* its place went to a new connection (conn_evict) */
                if (first) {
                    api_error e;
                    api_fail(&e, 408, "invalid_request_error", NULL, "request_timeout",
                             "the request was still arriving after %.1f s while all %d connections (--max-conns) "
                             "were open: the connection was closed to make room for a new one",
                             t - first, s->o.max_conns);
                    respond_error(s, c->fd, &e, 0, NULL);
                }
                goto out;
            }
            /* a new connection's head is due within the head limit from
             * accept, a kept-alive one's first byte within the idle
             * timeout; a head within the head limit from its first byte,
             * the whole request within --timeout */
            const int in_head = st == HTTP_PARTIAL;
            double deadline = !first ? start + (served ? s->o.idle_timeout : head_limit)
                              : in_head ? first + head_limit
                                        : first + s->o.read_timeout;
            if (t >= deadline || atomic_load(&s->stop)) {
                if (first && !atomic_load(&s->stop)) {
                    api_error e;
                    if (in_head)
                        api_fail(&e, 408, "invalid_request_error", NULL, "request_timeout",
                                 "the request head did not arrive within %g s", head_limit);
                    else
                        api_fail(&e, 408, "invalid_request_error", NULL, "request_timeout",
                                 "the request did not arrive within %g s", s->o.read_timeout);
                    respond_error(s, c->fd, &e, 0, NULL);
                    logf_("%s 408: request %s timeout", c->peer, in_head ? "head" : "body");
                }
                goto out;
            }
            double wait = deadline - t;
            struct pollfd p = {c->fd, POLLIN, 0};
            int pr = poll(&p, 1, (int)(wait > 0.25 ? 250 : wait * 1000 + 1));
            if (pr < 0 && errno != EINTR) goto out;
            if (pr <= 0) continue;
            ssize_t k = recv(c->fd, buf, sizeof buf, 0);
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (k == 0 && atomic_load(&c->evicted)) continue; /* answered above */
            if (k <= 0) goto out;
            if (!first) {
                first = gem_now_s();
                conn_phase(c, CONN_HEAD, first);
            }
            /* a body of known length is received into exactly its size
             * (growing by doubling would hold up to twice as much); r
             * points into `in`, so only once r is no longer read */
            if (st == HTTP_HEAD && !r.chunked && sb_room(&in, r.head_len + r.content_length - in.len)) goto out;
            sb_put(&in, buf, (size_t)k);
            if (in.failed) goto out;
        }
        if (st == HTTP_ERROR) {
            api_error e;
            api_fail(&e, r.status, "invalid_request_error", NULL, NULL, "%s", r.error);
            respond_error_as(s, c->fd, &e, anth_route(&r), 0, NULL, 0);
            logf_("%s %d: %s", c->peer, r.status, r.error);
            goto out;
        }
        conn_phase(c, CONN_BUSY, gem_now_s());
        const int keep = handle(c, &r);
        budget_release(s, &charged);
        if (!keep) goto out;
        size_t used = r.total_len;
        memmove(in.p, in.p + used, in.len - used);
        in.len -= used;
        if (in.cap > 1 << 20 && in.len < 4096) { /* do not keep a large body's buffer for the next request */
            strbuf small = {0};
            sb_put(&small, in.p, in.len);
            sb_free(&in);
            in = small;
        }
        if (body.cap > 1 << 20) sb_free(&body);
    }
out:
    budget_release(s, &charged);
    sb_free(&in);
    sb_free(&body);
    conn_leave(c);
    linger_close(c->fd);
    atomic_fetch_sub(&s->n_conns, 1);
    free(c);
    return NULL;
}

/* ---- main thread ---- */

static int listen_on(server *s) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int rc = getaddrinfo(s->o.host, port, &hints, &ai);
    if (rc) {
        fprintf(stderr, "gem serve: error: cannot resolve host '%s': %s\n", s->o.host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        fprintf(stderr, "gem serve: error: cannot listen on %s:%d: %s\n", s->o.host, s->o.port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    logf_("listening on http://%s%s%s:%s", ss.ss_family == AF_INET6 ? "[" : "", host,
          ss.ss_family == AF_INET6 ? "]" : "", serv);
    /* the Host guard follows the address bound, however --host spelled it */
    if (ss.ss_family == AF_INET) {
        s->loopback = (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    } else if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a6 = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        s->loopback = IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
    }
    s->lfd = fd;
    return 0;
}

static void peer_name(const struct sockaddr_storage *ss, socklen_t sl, char *out, size_t cap) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo((const struct sockaddr *)ss, sl, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV))
        snprintf(out, cap, "?");
    else snprintf(out, cap, "%s:%s", host, serv);
}

/* Connections that arrived while every place was taken (conn_admit). Such a
 * connection may evict a place's holder only once it has sent a complete
 * request head, within PROBATION_S: else a client reconnecting in a loop
 * would take each evicted place itself, while a request that arrives whole
 * (a /health probe, an ordinary completion) gets one at once. The accept
 * loop reads their heads (up to MAX_HEAD each) as it polls them with the
 * listening socket, and hands the bytes to the connection's thread;
 * beyond PROBATION_MAX waiting, or past the deadline, they get 503. */
#define PROBATION_MAX 64
#define PROBATION_S 1.0
typedef struct {
    struct {
        int fd;
        double until;
        char peer[64];
        strbuf head;
    } v[PROBATION_MAX];
    int n;
} probation;

static void refuse_busy(server *s, int fd) {
    api_error e;
    api_fail(&e, 503, "unavailable_error", NULL, "server_busy",
             "all %d connections (--max-conns) are busy; retry later", s->o.max_conns);
    respond_error(s, fd, &e, 0, "Retry-After: 1\r\n");
    close(fd);
}

/* Starts fd's connection thread with the bytes already read (pre, taken
 * over), in a free place or with evict an evicted one's; refused (503) when
 * there is none. */
static void start_conn(server *s, pthread_attr_t *attr, int fd, const char *peer, strbuf *pre, int evict) {
    conn *c = calloc(1, sizeof *c);
    pthread_t t;
    if (!c) {
        close(fd);
        sb_free(pre);
        return;
    }
    c->s = s;
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->pre = *pre;
    memset(pre, 0, sizeof *pre);
    if (conn_admit(s, c, evict)) {
        refuse_busy(s, fd);
        sb_free(&c->pre);
        free(c);
        return;
    }
    atomic_fetch_add(&s->n_conns, 1);
    if (pthread_create(&t, attr, conn_main, c)) {
        atomic_fetch_sub(&s->n_conns, 1);
        conn_leave(c);
        close(fd);
        sb_free(&c->pre);
        free(c);
    }
}

/* One round of the accept loop: waits (at most 200 ms) for a connection
 * or for bytes from one in probation, and serves what came. */
static void accept_round(server *s, pthread_attr_t *attr, probation *pb) {
    struct pollfd p[1 + PROBATION_MAX];
    double now = gem_now_s(), wait = 0.2;
    p[0] = (struct pollfd){s->lfd, POLLIN, 0};
    for (int i = 0; i < pb->n; i++) {
        p[1 + i] = (struct pollfd){pb->v[i].fd, POLLIN, 0};
        if (pb->v[i].until - now < wait) wait = pb->v[i].until - now;
    }
    if (poll(p, (nfds_t)(1 + pb->n), wait > 0 ? (int)(wait * 1000) + 1 : 0) < 0) return;
    now = gem_now_s();
    /* probation: a complete head (or a malformed one, answered by its
     * thread) is admitted, evicting; a closed or expired one is dropped */
    for (int i = pb->n - 1; i >= 0; i--) {
        int gone = 0;
        if (p[1 + i].revents) {
            char buf[4096];
            const ssize_t k = recv(pb->v[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k > 0) sb_put(&pb->v[i].head, buf, (size_t)k);
            gone = k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) || pb->v[i].head.failed;
        }
        http_req r;
        const http_limits lim = {MAX_HEAD, s->o.max_body};
        const int st = gone ? HTTP_PARTIAL : http_parse(pb->v[i].head.p, pb->v[i].head.len, &lim, &r);
        if (st != HTTP_PARTIAL) {
            start_conn(s, attr, pb->v[i].fd, pb->v[i].peer, &pb->v[i].head, 1);
        } else if (gone || now >= pb->v[i].until) {
            if (gone) close(pb->v[i].fd);
            else refuse_busy(s, pb->v[i].fd);
            sb_free(&pb->v[i].head);
        } else {
            continue;
        }
        pb->v[i] = pb->v[--pb->n];
    }
    if (!(p[0].revents & POLLIN)) return;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) usleep(50000); /* out of descriptors: let connections close */
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const double st = s->o.send_timeout;
    struct timeval tv = {(time_t)st, (suseconds_t)((st - (time_t)st) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char peer[64];
    peer_name(&ss, sl, peer, sizeof peer);
    strbuf none = {0};
    pthread_mutex_lock(&s->conn_mu);
    int free_place = 0;
    for (int i = 0; i < s->o.max_conns && !free_place; i++) free_place = !s->conns[i];
    pthread_mutex_unlock(&s->conn_mu);
    if (free_place) {
        start_conn(s, attr, fd, peer, &none, 0);
    } else if (pb->n < PROBATION_MAX) {
        pb->v[pb->n].fd = fd;
        pb->v[pb->n].until = now + PROBATION_S;
        snprintf(pb->v[pb->n].peer, sizeof pb->v[pb->n].peer, "%s", peer);
        memset(&pb->v[pb->n].head, 0, sizeof pb->v[pb->n].head);
        pb->n++;
    } else {
        refuse_busy(s, fd);
    }
}

int server_run(const server_opts *o) {
    server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->o = *o;
    s->lfd = -1;
    const char *base = strrchr(o->model_path, '/');
    snprintf(s->alias, sizeof s->alias, "%s", o->alias ? o->alias : base ? base + 1 : o->model_path);
    s->started = (long long)time(NULL);
    s->id_base = rng_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    s->conns = calloc((size_t)o->max_conns, sizeof *s->conns);
    if (!s->conns || !(s->m = metrics_new())) {
        free(s->conns);
        free(s);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = 1;
    pthread_t worker;
    int have_worker = 0;
    if (listen_on(s)) goto done;
    if (pthread_create(&worker, NULL, worker_main, s)) goto done;
    have_worker = 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1 << 20);
    probation pb = {0};
    while (!got_signal && !atomic_load(&s->failed)) accept_round(s, &attr, &pb);
    for (int i = 0; i < pb.n; i++) {
        close(pb.v[i].fd);
        sb_free(&pb.v[i].head);
    }
    pthread_attr_destroy(&attr);
    rc = atomic_load(&s->failed) ? 1 : 0;
    if (rc) fprintf(stderr, "gem serve: error: %s\n", s->load_error);
    else logf_("stopping");
done:
    if (s->lfd >= 0) close(s->lfd);
    if (have_worker) {
        pthread_mutex_lock(&s->mu);
        s->stop_deadline = gem_now_s() + o->shutdown_grace; /* before stop: gen_poll reads it after */
        atomic_store(&s->stop, 1);
        for (int i = 0; i < s->n_slots; i++) pthread_cond_signal(&s->slots[i].cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(worker, NULL);
    }
    /* Connection threads may still be reading; the engine they no longer
     * reach is freed only when none remain, or the process exits. */
    for (int i = 0; i < 50 && atomic_load(&s->n_conns) > 0; i++) usleep(20000);
    if (atomic_load(&s->n_conns) == 0) {
        for (int i = 0; i < s->n_slots; i++) {
            gem_session_free(s->slots[i].sess);
            free(s->slots[i].held);
            pthread_cond_destroy(&s->slots[i].cv);
        }
        free(s->slots);
        pcache_free(s->pc); /* parked states: host memory, the engine's sessions gone */
        gem_engine_close(s->e);
        metrics_free(s->m);
        free(s->conns);
        free(s);
    }
    return rc;
}
