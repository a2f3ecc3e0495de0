/* HTTP/1.1 request parser and response heads (see http.h).
 *
 * The head is located first (the earliest blank line), then parsed line by
 * line; nothing is trusted before the blank line is found, so a head that
 * arrives byte by byte costs one scan per read and is re-parsed only once.
 * Limits are checked before any arithmetic that could overflow. */
#include "server/http.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int fail(http_req *r, int status, const char *why) {
    r->status = status;
    r->error = why;
    return HTTP_ERROR;
}

/* End of the head: the offset just past the first empty line, or 0. An
 * empty line is "\r\n" or "\n" right after a line end. */
static size_t find_head_end(const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (b[i] != '\n') continue;
        if (i + 1 < n && b[i + 1] == '\n') return i + 2;
        if (i + 2 < n && b[i + 1] == '\r' && b[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* The next line of b[*pos..end): sets *len to its length without the line
 * end. -1 for a bare CR or a line that does not end before `end`. */
static int next_line(const char *b, size_t end, size_t *pos, const char **line, size_t *len) {
    size_t i = *pos;
    while (i < end && b[i] != '\n') i++;
    if (i >= end) return -1;
    size_t l = i - *pos;
    if (l && b[*pos + l - 1] == '\r') l--;
    if (memchr(b + *pos, '\r', l)) return -1; /* a CR anywhere else */
    *line = b + *pos;
    *len = l;
    *pos = i + 1;
    return 0;
}

static int token_has(const char *v, size_t n, const char *tok) {
    /* comma-separated list, case-insensitive, optional whitespace */
    size_t tl = strlen(tok), i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
        size_t s = i;
        while (i < n && v[i] != ',') i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
        if (e - s == tl && !strncasecmp(v + s, tok, tl)) return 1;
    }
    return 0;
}

static int parse_request_line(const char *l, size_t n, http_req *r) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i])) i++;
    if (i == 0 || i >= sizeof r->method || i >= n || l[i] != ' ')
        return fail(r, i >= sizeof r->method ? 501 : 400, "malformed request line");
    memcpy(r->method, l, i);
    r->method[i] = 0;
    size_t t = ++i;
    while (i < n && l[i] != ' ') {
        unsigned char c = (unsigned char)l[i];
        if (c <= 0x20 || c >= 0x7f) return fail(r, 400, "invalid character in the request target");
        i++;
    }
    if (i == t || i >= n) return fail(r, 400, "malformed request line");
    r->target = l + t;
    r->target_len = i - t;
    if (r->target[0] != '/' && !(r->target_len == 1 && r->target[0] == '*'))
        return fail(r, 400, "the request target must be an absolute path");
    const char *q = memchr(r->target, '?', r->target_len);
    r->path_len = q ? (size_t)(q - r->target) : r->target_len;
    i++;
    if (n - i != 8 || memcmp(l + i, "HTTP/", 5) || l[i + 6] != '.' || l[i + 5] < '0' || l[i + 5] > '9' ||
        l[i + 7] < '0' || l[i + 7] > '9')
        return fail(r, 400, "malformed HTTP version");
    if (l[i + 5] != '1') return fail(r, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    r->minor = l[i + 7] - '0';
    if (r->minor > 1) return fail(r, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    return 0;
}

static int parse_header(const char *l, size_t n, http_req *r) {
    if (n && (l[0] == ' ' || l[0] == '\t')) return fail(r, 400, "obsolete header line folding");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i])) i++;
    if (i == 0 || i >= n || l[i] != ':') return fail(r, 400, "malformed header line");
    if (r->n_headers >= HTTP_MAX_HEADERS) return fail(r, 431, "too many header fields");
    size_t v = i + 1, e = n;
    while (v < e && (l[v] == ' ' || l[v] == '\t')) v++;
    while (e > v && (l[e - 1] == ' ' || l[e - 1] == '\t')) e--;
    for (size_t k = v; k < e; k++) {
        unsigned char c = (unsigned char)l[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(r, 400, "invalid character in a header value");
    }
    http_header *h = &r->headers[r->n_headers++];
    h->name = l;
    h->name_len = i;
    h->value = l + v;
    h->value_len = e - v;
    return 0;
}

static int parse_length(const char *v, size_t n, size_t max, size_t *out, http_req *r) {
    if (n == 0) return fail(r, 400, "empty Content-Length");
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return fail(r, 400, "malformed Content-Length");
        if (x > (UINT64_MAX - 9) / 10) return fail(r, 413, "request body too large");
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (x > max) return fail(r, 413, "request body too large");
    *out = (size_t)x;
    return 0;
}

int http_parse(const char *buf, size_t n, const http_limits *lim, http_req *r) {
    memset(r, 0, sizeof *r);
    /* Empty lines before a request line are ignored (RFC 9112 2.2), a few. */
    size_t skip = 0;
    while (skip < n && skip < 8 && (buf[skip] == '\r' || buf[skip] == '\n')) skip++;
    const char *b = buf + skip;
    size_t bn = n - skip;
    size_t scan = bn < lim->max_head ? bn : lim->max_head;
    size_t end = find_head_end(b, scan);
    if (!end) {
        if (bn >= lim->max_head) return fail(r, 431, "request head too large");
        return HTTP_PARTIAL;
    }
    size_t pos = 0;
    const char *line;
    size_t len;
    if (next_line(b, end, &pos, &line, &len)) return fail(r, 400, "malformed request line");
    if (parse_request_line(line, len, r) == HTTP_ERROR) return HTTP_ERROR;
    int have_length = 0, conn_close = 0, conn_keep = 0, n_host = 0;
    for (;;) {
        if (next_line(b, end, &pos, &line, &len)) return fail(r, 400, "malformed header line");
        if (len == 0) break;
        if (parse_header(line, len, r) == HTTP_ERROR) return HTTP_ERROR;
        const http_header *h = &r->headers[r->n_headers - 1];
        if (h->name_len == 14 && !strncasecmp(h->name, "Content-Length", 14)) {
            size_t cl;
            if (parse_length(h->value, h->value_len, lim->max_body, &cl, r) == HTTP_ERROR) return HTTP_ERROR;
            if (have_length && cl != r->content_length) return fail(r, 400, "conflicting Content-Length values");
            r->content_length = cl;
            have_length = 1;
        } else if (h->name_len == 17 && !strncasecmp(h->name, "Transfer-Encoding", 17)) {
            if (r->chunked || h->value_len != 7 || strncasecmp(h->value, "chunked", 7))
                return fail(r, 501, "only the chunked transfer coding is supported");
            r->chunked = 1;
        } else if (h->name_len == 10 && !strncasecmp(h->name, "Connection", 10)) {
            conn_close |= token_has(h->value, h->value_len, "close");
            conn_keep |= token_has(h->value, h->value_len, "keep-alive");
        } else if (h->name_len == 4 && !strncasecmp(h->name, "Host", 4)) {
            n_host++;
        } else if (h->name_len == 6 && !strncasecmp(h->name, "Expect", 6)) {
            if (h->value_len == 12 && !strncasecmp(h->value, "100-continue", 12)) r->expect_continue = 1;
            else return fail(r, 417, "unsupported expectation");
        }
    }
    if (r->chunked && have_length) return fail(r, 400, "both Content-Length and Transfer-Encoding");
    if (r->chunked && r->minor == 0) return fail(r, 400, "Transfer-Encoding in an HTTP/1.0 request");
    /* RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host (the Host
     * guard and any proxy in front must agree on which name was meant) */
    if (r->minor >= 1 && n_host == 0) return fail(r, 400, "no Host header (HTTP/1.1 requires one)");
    if (n_host > 1) return fail(r, 400, "more than one Host header");
    r->head_len = skip + end;
    r->keep_alive = r->minor >= 1 ? !conn_close : (conn_keep && !conn_close);
    if (r->chunked) return HTTP_HEAD;
    if (n - r->head_len < r->content_length) return HTTP_HEAD;
    r->total_len = r->head_len + r->content_length;
    r->body = buf + r->head_len;
    return HTTP_DONE;
}

enum { DC_SIZE, DC_EXT, DC_SIZE_LF, DC_DATA, DC_DATA_CR, DC_DATA_LF, DC_TRAILER, DC_TRAILER_LF, DC_DONE };
#define DC_MAX_LINE 1024
#define DC_MAX_FRAMING 65536 /* beyond max_body (http.h) */
#define DC_MAX_TRAILER 16384

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int http_dechunk_feed(http_dechunk *d, const char *p, size_t n, size_t max_body, strbuf *body, size_t *used,
                      int *status, const char **why) {
    size_t i = 0;
#define DC_FAIL(st, msg) do { *status = (st); *why = (msg); *used = i; return HTTP_ERROR; } while (0)
    while (i < n && d->stage != DC_DONE) {
        char c = p[i];
        /* every stage but DC_DATA consumes one byte a round, all of it framing */
        if (d->stage != DC_DATA && ++d->framing > max_body + DC_MAX_FRAMING)
            DC_FAIL(413, "chunked request framing too large");
        if ((d->stage == DC_TRAILER || d->stage == DC_TRAILER_LF) && ++d->trailer > DC_MAX_TRAILER)
            DC_FAIL(400, "chunk trailer too long");
        switch (d->stage) {
        case DC_SIZE: {
            int h = hexval(c);
            if (h >= 0) {
                if (++d->digits > 15) DC_FAIL(413, "request body too large");
                d->left = d->left * 16 + (size_t)h;
                if (body->len + d->left > max_body) DC_FAIL(413, "request body too large");
                i++;
                break;
            }
            if (!d->digits) DC_FAIL(400, "malformed chunk size");
            d->stage = c == ';' ? DC_EXT : c == '\r' ? DC_SIZE_LF : -1;
            if (c == '\n') d->stage = d->left ? DC_DATA : DC_TRAILER;
            if (d->stage < 0) DC_FAIL(400, "malformed chunk size");
            i++;
            break;
        }
        case DC_EXT: /* chunk extensions are ignored, within a line limit */
            if (++d->line > DC_MAX_LINE) DC_FAIL(400, "chunk extension too long");
            if (c == '\r') d->stage = DC_SIZE_LF;
            else if (c == '\n') { /* bare LF: the line ends here, as DC_SIZE_LF ends it */
                d->stage = d->left ? DC_DATA : DC_TRAILER;
                d->line = 0;
            } else if ((unsigned char)c < 0x20 && c != '\t') DC_FAIL(400, "malformed chunk extension");
            i++;
            break;
        case DC_SIZE_LF:
            if (c != '\n') DC_FAIL(400, "malformed chunk size line");
            d->stage = d->left ? DC_DATA : DC_TRAILER;
            d->line = 0;
            i++;
            break;
        case DC_DATA: {
            size_t k = n - i < d->left ? n - i : d->left;
            sb_put(body, p + i, k);
            if (body->failed) DC_FAIL(413, "request body too large");
            d->left -= k;
            i += k;
            if (!d->left) d->stage = DC_DATA_CR;
            break;
        }
        case DC_DATA_CR:
            if (c == '\r') d->stage = DC_DATA_LF;
            else if (c == '\n') { d->stage = DC_SIZE; d->digits = 0; d->line = 0; }
            else DC_FAIL(400, "chunk data longer than its size");
            i++;
            break;
        case DC_DATA_LF:
            if (c != '\n') DC_FAIL(400, "chunk data longer than its size");
            d->stage = DC_SIZE;
            d->digits = 0;
            d->line = 0;
            i++;
            break;
        case DC_TRAILER: /* trailer fields are ignored; an empty line ends the body */
            if (c == '\n') {
                d->stage = d->line ? DC_TRAILER : DC_DONE;
                d->line = 0;
            } else if (c == '\r' && d->line == 0) {
                d->stage = DC_TRAILER_LF;
            } else {
                if (++d->line > DC_MAX_LINE) DC_FAIL(400, "chunk trailer too long");
                if ((unsigned char)c < 0x20 && c != '\t' && c != '\r') DC_FAIL(400, "malformed chunk trailer");
            }
            i++;
            break;
        case DC_TRAILER_LF:
            if (c != '\n') DC_FAIL(400, "malformed chunk trailer");
            d->stage = DC_DONE;
            i++;
            break;
        }
    }
#undef DC_FAIL
    *used = i;
    return d->stage == DC_DONE ? HTTP_DONE : HTTP_PARTIAL;
}

const char *http_header_get(const http_req *r, const char *name, size_t *len) {
    size_t nl = strlen(name);
    for (int i = 0; i < r->n_headers; i++) {
        const http_header *h = &r->headers[i];
        if (h->name_len == nl && !strncasecmp(h->name, name, nl)) {
            if (len) *len = h->value_len;
            return h->value;
        }
    }
    return NULL;
}

const char *http_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

void http_head(strbuf *out, int status, const char *content_type, long long content_length, int keep_alive,
               const char *extra) {
    sb_printf(out, "HTTP/1.1 %d %s\r\nServer: gem\r\n", status, http_reason(status));
    if (content_type) sb_printf(out, "Content-Type: %s\r\n", content_type);
    if (status == 204 || status < 200 || content_length == -2) {
        /* no body, or one that ends when the connection closes: no length header */
    } else if (content_length >= 0) {
        sb_printf(out, "Content-Length: %lld\r\n", content_length);
    } else {
        sb_puts(out, "Transfer-Encoding: chunked\r\n");
    }
    sb_puts(out, keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    if (extra) sb_puts(out, extra);
    sb_puts(out, "\r\n");
}

void http_chunk(strbuf *out, const char *p, size_t n) {
    if (!n) {
        sb_puts(out, "0\r\n\r\n");
        return;
    }
    sb_printf(out, "%zx\r\n", n);
    sb_put(out, p, n);
    sb_puts(out, "\r\n");
}
