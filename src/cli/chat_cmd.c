/* gem chat: an interactive terminal chat. Each turn renders the whole
 * conversation in the Gemma 4 format and hands it to the engine, whose
 * prefix policy keeps what the session already holds (the turns before the
 * last generation prompt: gem_session_sync). A line on stderr after each
 * answer says how many prompt tokens were reused. Ctrl-C cancels the
 * answer being generated; Ctrl-C at the prompt (or twice in a row) quits.
 * Commands: /reset, /quit. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat.h"
#include "cli/cli.h"
#include "engine/engine.h"

/* The only global mutable state in gem: a signal handler can reach nothing
 * else. Set by SIGINT, read and cleared by the chat loop. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted++;
}

typedef struct {
    strbuf content;
} answer;

static void on_event(const chat_event *ev, void *ctx) {
    answer *a = ctx;
    if (ev->kind == CHAT_EV_CONTENT) {
        fwrite(ev->text, 1, ev->len, stdout);
        fflush(stdout);
        sb_put(&a->content, ev->text, ev->len);
    } else if (ev->kind == CHAT_EV_REASONING) {
        fprintf(stderr, "\x1b[2m%.*s\x1b[0m", (int)ev->len, ev->text);
    } else {
        printf("\n[tool call] %s %s\n", ev->name, ev->arguments);
    }
}

/* The engine's callbacks: text through the chat parser (which ends the
 * answer at the turn's end), Ctrl-C as cancellation. */
static int on_text(void *ctx, const char *p, size_t n) {
    chat_parser_feed(ctx, p, n);
    return chat_parser_ended(ctx);
}

static int on_poll(void *ctx) {
    (void)ctx;
    return interrupted != 0;
}

int cli_chat(int argc, char **argv) {
    gem_engine_opts eo = {0};
    gem_sampling sp = gem_sampling_default();
    sp.temp = 0.8f;
    sp.top_k = 64;
    sp.top_p = 0.95f;
    const char *system = NULL;
    int think = -1, max_tokens = 1024;
    char mbuf[4096], mtp_buf[4096];
    cli_mtp mtp;
    cli_mtp_init(&mtp);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        int bad = 0, used, mr = cli_mtp_arg("chat", &mtp, a, v, &used);
        if (mr < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) eo.model_path = argv[++i];
        else if (!strcmp(a, "--system") && v) system = argv[++i];
        else if (!strcmp(a, "--think")) think = 1;
        else if (!strcmp(a, "--temp")) { bad = cli_parse_num(v, 0, 100, &x); sp.temp = (float)x; i++; }
        else if (!strcmp(a, "--seed")) { bad = cli_parse_num(v, 0, 1.8e19, &x); sp.seed = (uint64_t)x; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { bad = cli_parse_num(v, 1, 1e9, &x); max_tokens = (int)x; i++; }
        else if (!strcmp(a, "--ctx")) { bad = cli_parse_num(v, 1, 1 << 24, &x); eo.n_ctx = (int)x; i++; }
        else if (!strcmp(a, "-t")) { bad = cli_parse_num(v, 1, 1024, &x); eo.threads = (int)x; i++; }
        else {
            fprintf(stderr, "usage: gem chat -m FILE [--system TEXT] [--think] [--temp T] [--seed S] [-n MAX] [--ctx N] [-t N]\n"
                            "                [--mtp FILE | --no-mtp] [--draft-max N] [--draft-min N] [--draft-p-min P] [--draft-p-prod P]\n"
                            "                [--draft-fixed]\n");
            return 2;
        }
        if (bad) {
            fprintf(stderr, "gem chat: error: bad value for %s: '%s'\n", a, v ? v : "");
            return 2;
        }
    }
    if (!eo.model_path) eo.model_path = cli_data_path("models/default.gguf", mbuf, sizeof mbuf);
    eo.mtp_path = cli_mtp_path(&mtp, eo.model_path, 1, mtp_buf, sizeof mtp_buf);
    gem_err err = {{0}};
    gem_engine *e = cli_engine_open("chat", &eo, &mtp, &err);
    gem_session *s = e ? gem_session_new(e, &err) : NULL;
    if (!s) {
        fprintf(stderr, "gem chat: error: %s\n", err.msg);
        gem_engine_close(e);
        return 1;
    }
    const tok *tk = gem_engine_tok(e);
    const int tty = isatty(2); /* the stats line is dimmed on a terminal */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns */
    sigaction(SIGINT, &sa, NULL);
    json *msgs = json_new(JSON_ARRAY);
    if (system) {
        json *m = json_new(JSON_OBJECT);
        json_set(m, "role", json_new_str("system", 6));
        json_set(m, "content", json_new_str(system, strlen(system)));
        json_push(msgs, m);
    }
    fprintf(stderr, "gem chat: %s on %s%s%s. /reset clears the history, Ctrl-C stops an answer, Ctrl-C at the prompt quits.\n",
            gem_engine_profile(e), gem_engine_backend(e), gem_engine_mtp(e) ? ", drafts by " : "",
            gem_engine_mtp(e) ? gem_engine_mtp(e) : "");
    char line[8192];
    int turn = 0;
    for (;;) {
        printf("> ");
        fflush(stdout);
        interrupted = 0;
        if (!fgets(line, sizeof line, stdin)) break; /* EOF, or Ctrl-C at the prompt */
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (!strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            json_free(msgs);
            msgs = json_new(JSON_ARRAY);
            gem_session_reset(s);
            continue;
        }
        json *m = json_new(JSON_OBJECT);
        json_set(m, "role", json_new_str("user", 4));
        json_set(m, "content", json_new_str(line, len));
        json_push(msgs, m);
        strbuf text = {0};
        chat_render_opts ro = {msgs, NULL, think, 1, "<bos>", gem_engine_chat_format(e)};
        tok_ids ids = {0};
        if (chat_render(&ro, &text, &err) || tok_encode(tk, text.p, text.len, 0, 1, &ids)) {
            fprintf(stderr, "gem chat: error: %s\n", err.msg);
            sb_free(&text);
            break;
        }
        sb_free(&text);
        answer ans = {{0}};
        chat_parser *cp = chat_parser_new_format(ro.format, on_event, &ans);
        if (cp && chat_render_opens_reasoning(&ro)) chat_parser_in_reasoning(cp); /* the prompt ends inside <think> */
        gem_gen_params gp = gem_gen_params_default();
        gp.sampling = sp;
        gp.max_tokens = max_tokens;
        cli_mtp_params(&mtp, &gp);
        gem_gen_callbacks cb = {cp, NULL, on_text, on_poll, NULL};
        gem_gen_result res;
        const int bad = !cp || gem_session_sync(s, ids.v, ids.n, &err) < 0 || gem_session_generate(s, &gp, &cb, &res, &err);
        tok_ids_free(&ids);
        if (bad) {
            fprintf(stderr, "\ngem chat: error: %s\n", cp ? err.msg : "out of memory");
            chat_parser_free(cp);
            sb_free(&ans.content);
            json_free(json_at(msgs, msgs->len - 1));
            msgs->len--;
            continue;
        }
        chat_parser_finish(cp);
        chat_parser_free(cp);
        const int stopped = res.finish == GEM_FINISH_CANCELLED;
        printf(stopped ? " [stopped]\n" : "\n");
        fflush(stdout);
        char mtp_line[200];
        fprintf(stderr, "%s[turn %d: prompt %ld tokens, %ld reused, %.0f ms | %ld tokens, %.1f tok/s%s]%s\n",
                tty ? "\x1b[2m" : "", ++turn, res.n_prompt, res.n_cached, res.prompt_s * 1e3, res.n_generated,
                res.n_generated > 1 ? (res.n_generated - 1) / (res.decode_s > 0 ? res.decode_s : 1e-9) : 0.0,
                cli_mtp_summary(&res, mtp_line, sizeof mtp_line), tty ? "\x1b[0m" : "");
        if (stopped) { /* the partial answer is not kept in the history */
            json_free(json_at(msgs, msgs->len - 1));
            msgs->len--;
            sb_free(&ans.content);
            continue;
        }
        json *a = json_new(JSON_OBJECT);
        json_set(a, "role", json_new_str("assistant", 9));
        json_set(a, "content", json_new_str(sb_cstr(&ans.content), ans.content.len));
        json_push(msgs, a);
        sb_free(&ans.content);
    }
    printf("\n");
    json_free(msgs);
    gem_session_free(s);
    gem_engine_close(e);
    return 0;
}
