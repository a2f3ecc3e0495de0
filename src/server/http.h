/* HTTP/1.1 request parsing and response heads for `gem serve`.
 *
 * The parser is a pure function over the bytes received so far: the server
 * calls it again whenever more arrive, and it answers "need more", "head
 * complete" (so the server can answer Expect: 100-continue or refuse an
 * oversized body before reading it) or "request complete", or an error with
 * the status to answer. It never allocates and never reads past n, so it can
 * be fuzzed directly. Everything it returns points into the caller's buffer.
 *
 * What it accepts (RFC 9112, strictly where laxness would be a smuggling or
 * injection risk): a request line "METHOD SP target SP HTTP/1.x", header
 * lines "name: value" ended by CRLF (a bare LF is tolerated, a bare CR is
 * not), no obsolete line folding, no whitespace before the colon, a body
 * by Content-Length (repeated values must agree) or by "Transfer-Encoding:
 * chunked", decoded incrementally by http_dechunk_feed. A request with both
 * is refused (400: the classic smuggling ambiguity), as is any other
 * transfer coding (501). An HTTP/1.1 request needs exactly one Host header,
 * an HTTP/1.0 one at most one (400 otherwise, RFC 9112 3.2). */
#ifndef GEM_SERVER_HTTP_H
#define GEM_SERVER_HTTP_H

#include <stddef.h>

#include "util/strbuf.h"

#define HTTP_MAX_HEADERS 64

typedef struct {
    size_t max_head; /* request line and headers, blank line included */
    size_t max_body; /* Content-Length limit (413 above it) */
} http_limits;

typedef struct {
    const char *name, *value;
    size_t name_len, value_len;
} http_header;

typedef struct {
    char method[16];
    const char *target; /* as sent: path and query */
    size_t target_len;
    size_t path_len;    /* target bytes before '?' */
    int minor;          /* HTTP/1.minor */
    http_header headers[HTTP_MAX_HEADERS];
    int n_headers;
    size_t head_len;    /* bytes up to and including the blank line */
    size_t content_length;
    size_t total_len;   /* head_len + content_length, when complete */
    const char *body;   /* when complete */
    int keep_alive;
    int expect_continue;
    int chunked;        /* the body is chunked: HTTP_HEAD, then http_dechunk_feed */
    int status;         /* when HTTP_ERROR: the status to answer */
    const char *error;  /* when HTTP_ERROR: why (a static string) */
} http_req;

enum { HTTP_ERROR = -1, HTTP_PARTIAL = 0, HTTP_HEAD = 1, HTTP_DONE = 2 };

/* Parses buf[0..n). HTTP_PARTIAL: the head is not complete yet (and within
 * max_head); HTTP_HEAD: the head is complete, the body is not; HTTP_DONE:
 * the whole request is there (total_len bytes; any more belong to the next
 * request). */
int http_parse(const char *buf, size_t n, const http_limits *lim, http_req *r);

/* A chunked body, decoded as its bytes arrive (state kept between calls,
 * so a body that trickles in is scanned once). */
typedef struct {
    int stage;     /* size line, data, data CRLF, trailer, done */
    size_t left;   /* data bytes left in the current chunk */
    size_t line;   /* bytes of the current size or trailer line */
    int digits;    /* hex digits of the current size */
    size_t framing; /* bytes of size lines, extensions, CRLFs and trailer so far */
    size_t trailer; /* bytes of the trailer so far */
} http_dechunk;

/* Feeds p[0..n) (the bytes after what was consumed before); appends data to
 * body and sets *used to the bytes consumed. HTTP_DONE after the last chunk
 * and the trailer (*used then ends exactly there), HTTP_PARTIAL for more,
 * HTTP_ERROR with *status (400 or 413) and *why. The raw request is kept
 * until it is done, so besides max_body of data its framing is bounded
 * (max_body + 64 KiB: 413) and so is the trailer (16 KiB: 400). */
int http_dechunk_feed(http_dechunk *d, const char *p, size_t n, size_t max_body, strbuf *body, size_t *used,
                      int *status, const char **why);

/* A header's value (case-insensitive name), or NULL. */
const char *http_header_get(const http_req *r, const char *name, size_t *len);

/* The reason phrase of a status ("Bad Request"). */
const char *http_reason(int status);

/* Appends a response head: status line, Content-Type (when given),
 * Content-Length (when content_length >= 0), Transfer-Encoding: chunked
 * (when -1) or neither (-2: the body ends when the connection closes, what
 * HTTP/1.0 streams need), Connection, then `extra` (header lines, each ending in
 * CRLF, or NULL) and the blank line. */
void http_head(strbuf *out, int status, const char *content_type, long long content_length, int keep_alive,
               const char *extra);

/* Appends one chunk of a chunked body (n > 0), or the last chunk (n == 0). */
void http_chunk(strbuf *out, const char *p, size_t n);

#endif
