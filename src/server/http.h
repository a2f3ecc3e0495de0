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
 * only by Content-Length (repeated values must agree). Transfer-Encoding in
 * a request is refused (501): a Content-Length body is all the OpenAI
 * clients send, and refusing it removes the classic CL/TE ambiguity. */
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
    int status;         /* when HTTP_ERROR: the status to answer */
    const char *error;  /* when HTTP_ERROR: why (a static string) */
} http_req;

enum { HTTP_ERROR = -1, HTTP_PARTIAL = 0, HTTP_HEAD = 1, HTTP_DONE = 2 };

/* Parses buf[0..n). HTTP_PARTIAL: the head is not complete yet (and within
 * max_head); HTTP_HEAD: the head is complete, the body is not; HTTP_DONE:
 * the whole request is there (total_len bytes; any more belong to the next
 * request). */
int http_parse(const char *buf, size_t n, const http_limits *lim, http_req *r);

/* A header's value (case-insensitive name), or NULL. */
const char *http_header_get(const http_req *r, const char *name, size_t *len);

/* The reason phrase of a status ("Bad Request"). */
const char *http_reason(int status);

/* Appends a response head: status line, Content-Type (when given),
 * Content-Length (when content_length >= 0) or Transfer-Encoding: chunked
 * (when -1), Connection, then `extra` (complete header lines, each ending in
 * CRLF, or NULL) and the blank line. */
void http_head(strbuf *out, int status, const char *content_type, long long content_length, int keep_alive,
               const char *extra);

/* Appends one chunk of a chunked body (n > 0), or the last chunk (n == 0). */
void http_chunk(strbuf *out, const char *p, size_t n);

#endif
