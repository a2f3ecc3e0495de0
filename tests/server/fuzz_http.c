/* libFuzzer target: the HTTP request parser. Beyond not crashing: every
 * pointer it returns lies inside the input, lengths add up, an error names
 * a 4xx/5xx status and a reason, a complete request's every prefix parses
 * as incomplete (never as an error or another request), a chunked body
 * decodes identically whole or in pieces, and the response head and chunk
 * writers produce what they promise. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

static int inside(const char *p, size_t n, const uint8_t *d, size_t size) {
    return p >= (const char *)d && p + n <= (const char *)d + size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    http_limits lim = {512, 1024};
    http_req r;
    const char *b = (const char *)data;
    int rc = http_parse(b, size, &lim, &r);
    if (rc == HTTP_ERROR) {
        if (r.status < 400 || r.status > 505 || !r.error || !*r.error) abort();
        return 0;
    }
    if (rc == HTTP_PARTIAL) {
        if (size > lim.max_head + 8) abort(); /* a head that cannot fit must be refused */
        return 0;
    }
    if (rc != HTTP_HEAD && rc != HTTP_DONE) abort();
    if (r.chunked) {
        if (rc != HTTP_HEAD || r.content_length) abort();
        /* the chunked body decodes the same whole or in small pieces */
        const char *rest = b + r.head_len;
        size_t n = size - r.head_len, used_all = 0;
        strbuf whole = {0}, pieces = {0};
        http_dechunk d1 = {0}, d2 = {0};
        int st1 = 0, st2 = 0;
        const char *why1 = NULL, *why2 = NULL;
        int r1 = http_dechunk_feed(&d1, rest, n, lim.max_body, &whole, &used_all, &st1, &why1);
        int r2 = HTTP_PARTIAL;
        size_t off = 0, step = 1 + (size ? data[0] % 7 : 0);
        while (off < n && r2 == HTTP_PARTIAL) {
            size_t k = n - off < step ? n - off : step, used;
            r2 = http_dechunk_feed(&d2, rest + off, k, lim.max_body, &pieces, &used, &st2, &why2);
            if (used > k || (r2 == HTTP_PARTIAL && used != k)) abort();
            off += used;
        }
        if (used_all > n || whole.len > lim.max_body) abort();
        if (r1 != r2 || (r1 != HTTP_PARTIAL && off != used_all)) abort();
        if (r1 == HTTP_DONE && (whole.len != pieces.len || (whole.len && memcmp(whole.p, pieces.p, whole.len)))) abort();
        if (r1 == HTTP_ERROR && (st1 != st2 || !why1 || strcmp(why1, why2))) abort();
        sb_free(&whole);
        sb_free(&pieces);
        return 0;
    }
    if (r.head_len > size || r.content_length > lim.max_body) abort();
    if (!inside(r.target, r.target_len, data, size) || r.path_len > r.target_len || r.target[0] == 0) abort();
    if (r.minor < 0 || r.minor > 1 || !r.method[0]) abort();
    for (int i = 0; i < r.n_headers; i++) {
        const http_header *h = &r.headers[i];
        if (!inside(h->name, h->name_len, data, size) || !inside(h->value, h->value_len, data, size)) abort();
        if (!h->name_len || memchr(h->value, '\n', h->value_len) || memchr(h->value, '\r', h->value_len)) abort();
    }
    if (rc == HTTP_DONE) {
        if (r.total_len != r.head_len + r.content_length || r.total_len > size) abort();
        if (!inside(r.body, r.content_length, data, size)) abort();
        /* every shorter prefix is incomplete; the head's prefixes are PARTIAL */
        size_t head = r.head_len, total = r.total_len;
        for (size_t k = 0; k < total; k += 1 + k / 8) {
            http_req q;
            int pr = http_parse(b, k, &lim, &q);
            if (pr != HTTP_PARTIAL && pr != HTTP_HEAD) abort();
            if (pr == HTTP_HEAD && (k < head || q.head_len != head)) abort();
        }
    }
    strbuf o = {0};
    http_head(&o, 200, "text/plain", (long long)r.content_length, r.keep_alive, NULL);
    if (rc == HTTP_DONE) http_chunk(&o, r.body, r.content_length);
    if (o.failed || memcmp(o.p, "HTTP/1.1 200 OK\r\n", 17)) abort();
    sb_free(&o);
    return 0;
}
