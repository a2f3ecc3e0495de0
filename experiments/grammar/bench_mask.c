/* gram_mask speed on the Gemma 4 vocabulary: for representative matcher
 * states, the first mask with an empty cache (a fresh gram_vocab: cold),
 * the first mask of a freshly compiled grammar whose shapes the vocabulary
 * has already cached (a new request with a schema seen before: memo), and
 * repeated masks (warm: mean and max); then masks along whole texts
 * (every token step of a realistic output, tokenized by gem's tokenizer),
 * cold and warm; and the single-token check.
 *
 * Not part of make test. Build and run from the top of the tree:
 *   make CUDA=0 lib-objs && make -C experiments/grammar
 *   build/experiments/bench_mask [REPS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "tok/tok.h"
#include "util/clock.h"

static const tok *T;

/* this thread's CPU time: a warm maximum in wall time can be a preemption */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const char *label;
    const char *schema; /* NULL: json_object mode */
    int syntax;
    int tools; /* schema is a tools array */
    int reasoning;
    const char *prefix; /* fed before the mask */
} scase;

#define Q "<|\"|>"
#define READ_FILE                                                                                                      \
    "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"offset\":{\"type\":\"integer\",\"minimum\":0},"   \
    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":2000},\"encoding\":{\"enum\":[\"utf-8\",\"latin-1\"]}},"       \
    "\"required\":[\"path\"],\"additionalProperties\":false}"
#define EVENT                                                                                                          \
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":120},\"start\":{\"type\":\"string\"," \
    "\"format\":\"date-time\"},\"attendees\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"email\":"  \
    "{\"type\":\"string\"},\"optional\":{\"type\":\"boolean\"}},\"required\":[\"email\"]}},\"price\":{\"type\":\"number\"}},"   \
    "\"required\":[\"title\",\"start\"]}"
#define TOOLS                                                                                                          \
    "[{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"parameters\":" READ_FILE "}},"                        \
    "{\"type\":\"function\",\"function\":{\"name\":\"create_event\",\"parameters\":" EVENT "}}]"

static const scase cases[] = {
    {"json_object: start", NULL, GRAM_SYNTAX_JSON, 0, 0, ""},
    {"json_object: after {", NULL, GRAM_SYNTAX_JSON, 0, 0, "{"},
    {"json_object: in a key", NULL, GRAM_SYNTAX_JSON, 0, 0, "{\"na"},
    {"json_object: after a key", NULL, GRAM_SYNTAX_JSON, 0, 0, "{\"name\":"},
    {"json_object: in a string value", NULL, GRAM_SYNTAX_JSON, 0, 0, "{\"name\":\"Ada Love"},
    {"json_object: in a number", NULL, GRAM_SYNTAX_JSON, 0, 0, "{\"n\":12"},
    {"json_object: nested array", NULL, GRAM_SYNTAX_JSON, 0, 0, "{\"a\":[{\"b\":[1,"},
    {"schema: after {", READ_FILE, GRAM_SYNTAX_JSON, 0, 0, "{"},
    {"schema: after a key", READ_FILE, GRAM_SYNTAX_JSON, 0, 0, "{\"path\":"},
    {"schema: in a string value", READ_FILE, GRAM_SYNTAX_JSON, 0, 0, "{\"path\":\"/home/u"},
    {"schema: in an integer range", READ_FILE, GRAM_SYNTAX_JSON, 0, 0, "{\"path\":\"a\",\"limit\":1"},
    {"schema: in an enum", READ_FILE, GRAM_SYNTAX_JSON, 0, 0, "{\"path\":\"a\",\"encoding\":\"u"},
    {"schema: maxLength string", EVENT, GRAM_SYNTAX_JSON, 0, 0, "{\"title\":\"Standup"},
    {"schema: date-time", EVENT, GRAM_SYNTAX_JSON, 0, 0, "{\"title\":\"x\",\"start\":\"2025-0"},
    {"schema: array of objects", EVENT, GRAM_SYNTAX_JSON, 0, 0, "{\"title\":\"x\",\"start\":\"2025-01-01T00:00:00Z\",\"attendees\":[{\"email\":\"a\"},"},
    {"gemma: after {", READ_FILE, GRAM_SYNTAX_GEMMA, 0, 0, "{"},
    {"gemma: in a <|\"|> string", READ_FILE, GRAM_SYNTAX_GEMMA, 0, 0, "{path:" Q "/home/u"},
    {"gemma: after a value", READ_FILE, GRAM_SYNTAX_GEMMA, 0, 0, "{path:" Q "a" Q},
    {"tool calls: start", TOOLS, GRAM_SYNTAX_GEMMA, 1, 0, ""},
    {"tool calls: name", TOOLS, GRAM_SYNTAX_GEMMA, 1, 0, "<|tool_call>call:"},
    {"tool calls: in a string", TOOLS, GRAM_SYNTAX_GEMMA, 1, 0, "<|tool_call>call:create_event{title:" Q "Stand"},
    {"reasoning: in the thought", NULL, GRAM_SYNTAX_JSON, 0, 1, "<|channel>thought\nThe user wants"},
};

static gram *compile(const scase *c) {
    gem_err err = {{0}};
    json *j = c->schema ? json_parse(c->schema, strlen(c->schema), &err) : NULL;
    gram *g = c->tools ? gram_tool_calls(j, NULL, 0, &err) : gram_json_schema(j, c->syntax, &err);
    json_free(j);
    if (g && c->reasoning) {
        gram *r = gram_with_reasoning(g, &err);
        gram_free(g);
        g = r;
    }
    if (!g) fprintf(stderr, "%s: %s\n", c->label, err.msg);
    return g;
}

static gram_state *state_at(const gram *g, const char *prefix) {
    gram_state *s = gram_state_new(g);
    if (s && gram_state_feed(s, prefix, strlen(prefix))) {
        fprintf(stderr, "prefix refused: %s\n", prefix);
        gram_state_free(s);
        return NULL;
    }
    return s;
}

/* masks at every token step of text (tokenized), first pass and second */
static void along(const char *label, const scase *c, const char *text, uint32_t *bits, gem_err *err) {
    tok_ids ids = {0};
    tok_encode(T, text, strlen(text), 0, 0, &ids);
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: a fresh vocabulary (every cache cold); 1: a fresh grammar
         * on the warm vocabulary; 2: everything warm */
        static gram_vocab *v;
        if (pass == 0) {
            gram_vocab_free(v);
            v = gram_vocab_new(T, err);
        }
        static gram *g;
        if (pass < 2) {
            gram_free(g);
            g = compile(c);
        }
        gram_state *s = gram_state_new(g);
        double sum = 0, mx = 0;
        size_t steps = 0;
        for (size_t i = 0; i <= ids.n; i++) {
            double t0 = gem_now_s();
            int n = gram_mask(s, v, bits);
            double dt = gem_now_s() - t0;
            sum += dt;
            if (dt > mx) mx = dt;
            steps++;
            if (i == ids.n) break;
            if (n <= 0 || gram_accept_token(s, v, ids.v[i])) {
                fprintf(stderr, "%s: token %zu refused\n", label, i);
                break;
            }
        }
        printf("  %-34s %-6s %4zu steps  mean %8.3f ms  max %8.3f ms  total %8.1f ms\n", label,
               pass == 0 ? "cold" : pass == 1 ? "memo" : "warm", steps, sum / (double)steps * 1e3, mx * 1e3, sum * 1e3);
        gram_state_free(s);
        if (pass == 2 && c == NULL) {
            gram_free(g);
            g = NULL;
        }
    }
    tok_ids_free(&ids);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    gem_err err = {{0}};
    gguf_file *f = gguf_open("data/vocab/gemma-4.gguf", &err);
    tok *t = f ? tok_load(f, &err) : NULL;
    if (!t) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    T = t;
    double t0 = gem_now_s();
    gram_vocab *v = gram_vocab_new(t, &err);
    printf("gram_vocab_new: %.1f ms (%u tokens)\n", (gem_now_s() - t0) * 1e3, gram_vocab_size(v));
    uint32_t *bits = malloc((gram_vocab_size(v) + 31) / 32 * sizeof *bits);
    printf("%-36s %8s %9s %9s %9s %9s %9s %7s\n", "state", "allowed", "cold ms", "memo ms", "warm mean", "warm max", "max cpu", "ok us");
    double warm_sum = 0, warm_max = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const scase *c = &cases[i];
        /* cold: a vocabulary of its own, nothing cached */
        gram_vocab *cv = gram_vocab_new(t, &err);
        gram *g = compile(c);
        gram_state *s = g ? state_at(g, c->prefix) : NULL;
        if (!s) return 1;
        t0 = gem_now_s();
        int n = gram_mask(s, cv, bits);
        double cold = gem_now_s() - t0;
        /* memo: a new grammar (same schema) on that now warm vocabulary */
        gram *g2 = compile(c);
        gram_state *s2 = state_at(g2, c->prefix);
        t0 = gem_now_s();
        gram_mask(s2, cv, bits);
        double memo = gem_now_s() - t0;
        /* warm */
        double sum = 0, mx = 0, cmx = 0;
        for (int r = 0; r < reps; r++) {
            t0 = gem_now_s();
            double c0 = cpu_now();
            gram_mask(s2, cv, bits);
            double dt = gem_now_s() - t0, dc = cpu_now() - c0;
            sum += dt;
            if (dt > mx) mx = dt;
            if (dc > cmx) cmx = dc;
        }
        /* the single-token check, over the first 20000 ids */
        t0 = gem_now_s();
        int okc = 0;
        for (int32_t id = 0; id < 20000; id++) okc += gram_token_ok(s2, cv, id);
        double tok_us = (gem_now_s() - t0) / 20000 * 1e6;
        (void)okc;
        printf("%-36s %8d %9.2f %9.3f %9.4f %9.4f %9.4f %7.2f\n", c->label, n, cold * 1e3, memo * 1e3, sum / reps * 1e3, mx * 1e3,
               cmx * 1e3, tok_us);
        warm_sum += sum / reps;
        if (cmx > warm_max) warm_max = cmx;
        gram_state_free(s);
        gram_state_free(s2);
        gram_free(g);
        gram_free(g2);
        gram_vocab_free(cv);
    }
    printf("warm over the states: mean of means %.4f ms, max (cpu) %.4f ms\n\n", warm_sum / (sizeof cases / sizeof *cases) * 1e3,
           warm_max * 1e3);
    printf("masks along whole outputs (every token step):\n");
    along("json_object answer", &cases[0],
          "{\"name\":\"Ada Lovelace\",\"born\":1815,\"fields\":[\"mathematics\",\"computing\"],\"notes\":{\"first program\":true,"
          "\"quote\":\"The Analytical Engine weaves algebraic patterns just as the Jacquard loom weaves flowers and leaves.\"}}",
          bits, &err);
    along("read_file arguments (JSON)", &cases[7], "{\"path\":\"/home/user/project/src/main.c\",\"offset\":10,\"limit\":200}", bits,
          &err);
    along("event arguments (JSON)", &cases[12],
          "{\"title\":\"Weekly planning\",\"start\":\"2025-03-04T09:30:00+01:00\",\"attendees\":[{\"email\":\"ana@example.com\"},"
          "{\"email\":\"bo@example.com\",\"optional\":true}],\"price\":12.5}",
          bits, &err);
    along("tool call (Gemma)", &cases[18],
          "<|tool_call>call:create_event{title:" Q "Weekly planning" Q ",start:" Q "2025-03-04T09:30:00Z" Q
          ",attendees:[{email:" Q "ana@example.com" Q "}]}<tool_call|>",
          bits, &err);
    free(bits);
    gram_vocab_free(v);
    tok_free(t);
    gguf_close(f);
    return 0;
}
