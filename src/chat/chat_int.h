/* Internal to src/chat: the parser state every format shares and the
 * streaming helpers its step functions use (chat.c), and each format's
 * entry points. A format's step consumes as much pending text as is final
 * and leaves the rest for the next feed (final = 1: everything is). */
#ifndef GEM_CHAT_CHAT_INT_H
#define GEM_CHAT_CHAT_INT_H

#include "chat/chat.h"

/* st value of an ended parser, whatever the format */
#define CHAT_ST_ENDED 0x7fff

struct chat_parser {
    chat_format format;
    chat_event_fn fn;
    void *ctx;
    int st;      /* the format's state */
    strbuf pend; /* text not yet final */
    int max_calls, calls; /* max_calls > 0: the answer ends after that many calls */
    const json *tools;    /* chat_parser_set_tools */
    int skip_ws;          /* Qwen: drop white space before the next text */
    strbuf ws;            /* Qwen: white space held until text follows it */
};

void chat_emit(chat_parser *p, chat_ev_kind k, const char *s, size_t n);
/* Drops the first n pending bytes. */
void chat_consume(chat_parser *p, size_t n);
/* Earliest marker of the list in s[0..n); returns its offset (and *which)
 * or -1. */
long chat_find_first(const char *s, size_t n, const char *const *markers, int nm, int *which);
/* Length of the longest suffix of s that is a proper prefix of a marker. */
size_t chat_held_suffix(const char *s, size_t n, const char *const *markers, int nm);

int chat_gemma4_render(const chat_render_opts *o, strbuf *out, gem_err *err);
void chat_gemma4_step(chat_parser *p, int final);
int chat_qwen35_render(const chat_render_opts *o, strbuf *out, gem_err *err);
void chat_qwen35_step(chat_parser *p, int final);

#endif
