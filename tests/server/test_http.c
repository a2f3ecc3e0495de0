/* The HTTP/1.1 request parser: complete and partial requests, keep-alive
 * rules, limits and every rejection with its status. */
#include "server/http.h"

#include "test.h"

static http_limits lim = {1024, 4096};

static int parse(const char *s, http_req *r) { return http_parse(s, strlen(s), &lim, r); }

static void expect_error(const char *s, int status, const char *why) {
    http_req r;
    int rc = parse(s, &r);
    CHECKF(rc == HTTP_ERROR && r.status == status, "'%s': rc %d status %d, want error %d", s, rc, r.status, status);
    if (rc == HTTP_ERROR) CHECK_ERR(r.error, why);
}

static void test_complete(void) {
    http_req r;
    const char *get = "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
    CHECK(parse(get, &r) == HTTP_DONE);
    CHECK(!strcmp(r.method, "GET"));
    CHECK(r.target_len == 14 && !memcmp(r.target, "/v1/models?x=1", 14));
    CHECK(r.path_len == 10);
    CHECK(r.minor == 1 && r.keep_alive == 1);
    CHECK(r.n_headers == 2);
    CHECK(r.total_len == strlen(get) && r.content_length == 0);
    size_t n;
    const char *v = http_header_get(&r, "host", &n);
    CHECK(v && n == 1 && *v == 'a');
    CHECK(http_header_get(&r, "Content-Type", &n) == NULL);

    const char *post = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Pad:   spaced value \t\r\n\r\nhelloGET";
    CHECK(parse(post, &r) == HTTP_DONE);
    CHECK(r.body && !memcmp(r.body, "hello", 5) && r.content_length == 5);
    CHECK(r.total_len == strlen(post) - 3); /* "GET" belongs to the next request */
    v = http_header_get(&r, "x-pad", &n);
    CHECK(v && n == 12 && !memcmp(v, "spaced value", 12));

    /* bare LF line ends, leading empty lines */
    CHECK(parse("\r\nGET / HTTP/1.1\nHost: x\n\n", &r) == HTTP_DONE && r.path_len == 1);
    CHECK(r.head_len == strlen("\r\nGET / HTTP/1.1\nHost: x\n\n"));
    /* no headers at all */
    CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) == HTTP_DONE && r.minor == 0 && r.keep_alive == 0);
}

static void test_keep_alive(void) {
    http_req r;
    CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &r) == HTTP_DONE && !r.keep_alive);
    CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, CLOSE\r\n\r\n", &r) == HTTP_DONE && !r.keep_alive);
    CHECK(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r) == HTTP_DONE && r.keep_alive);
    CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", &r) == HTTP_DONE && r.keep_alive);
}

static void test_partial(void) {
    http_req r;
    const char *full = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\nbody";
    size_t n = strlen(full), head = n - 4;
    for (size_t k = 0; k < n; k++) {
        int rc = http_parse(full, k, &lim, &r);
        int want = k < head ? HTTP_PARTIAL : HTTP_HEAD;
        CHECKF(rc == want, "prefix %zu: rc %d, want %d", k, rc, want);
    }
    CHECK(http_parse(full, n, &lim, &r) == HTTP_DONE && r.expect_continue);
    CHECK(http_parse(full, head, &lim, &r) == HTTP_HEAD && r.content_length == 4 && r.expect_continue);
}

static void test_errors(void) {
    expect_error("GET\r\n\r\n", 400, "malformed request line");
    expect_error("GET /\r\n\r\n", 400, "malformed request line");
    expect_error("GET / HTTP/1.1 extra\r\n\r\n", 400, "malformed HTTP version");
    expect_error("GET  / HTTP/1.1\r\n\r\n", 400, "malformed request line");
    expect_error("GET / HTTP/2.0\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1");
    expect_error("GET / HTTP/1.2\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1");
    expect_error("GET / FTP/1.1\r\n\r\n", 400, "malformed HTTP version");
    expect_error("GET http://x/ HTTP/1.1\r\n\r\n", 400, "absolute path");
    expect_error("GET /a\x01 HTTP/1.1\r\n\r\n", 400, "invalid character in the request target");
    expect_error("GET /\xc3\xa9 HTTP/1.1\r\n\r\n", 400, "invalid character in the request target");
    expect_error("VERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", 501, "malformed request line");
    expect_error("G(T / HTTP/1.1\r\n\r\n", 400, "malformed request line");
    expect_error("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400, "malformed header line");
    expect_error("GET / HTTP/1.1\r\nName : v\r\n\r\n", 400, "malformed header line");
    expect_error("GET / HTTP/1.1\r\n: v\r\n\r\n", 400, "malformed header line");
    expect_error("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, "obsolete header line folding");
    expect_error("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400, "invalid character in a header value");
    expect_error("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400, "malformed header line");
    expect_error("POST / HTTP/1.1\r\nContent-Length: 12a\r\n\r\n", 400, "malformed Content-Length");
    expect_error("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "malformed Content-Length");
    expect_error("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "empty Content-Length");
    expect_error("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400, "conflicting Content-Length");
    expect_error("POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413, "too large");
    expect_error("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413, "too large");
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "only the chunked transfer coding");
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "only the chunked transfer coding");
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501,
                 "only the chunked transfer coding");
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400,
                 "both Content-Length and Transfer-Encoding");
    expect_error("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0");
    expect_error("POST / HTTP/1.1\r\nExpect: something\r\n\r\n", 417, "unsupported expectation");
    /* same Content-Length twice is fine */
    http_req r;
    CHECK(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok", &r) == HTTP_DONE);
}

/* RFC 9112 3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0 */
static void test_host(void) {
    http_req r;
    expect_error("GET / HTTP/1.1\r\n\r\n", 400, "no Host header (HTTP/1.1 requires one)");
    expect_error("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nok", 400, "no Host header");
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400, "more than one Host header");
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nX: y\r\nHOST: b\r\n\r\n", 400, "more than one Host header");
    expect_error("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host header");
    /* a missing Host is an error of the complete head only: a head still
     * arriving is partial, not refused before its Host line comes */
    CHECK(parse("GET / HTTP/1.1\r\n", &r) == HTTP_PARTIAL);
    CHECK(parse("GET / HTTP/1.0\r\n\r\n", &r) == HTTP_DONE);
    CHECK(parse("GET / HTTP/1.1\r\nHost:\r\n\r\n", &r) == HTTP_DONE); /* empty: allowed (no authority) */
}

static void test_limits(void) {
    http_req r;
    char big[2048];
    /* a head that never ends within max_head */
    memset(big, 'a', sizeof big);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    CHECK(http_parse(big, 1023, &lim, &r) == HTTP_PARTIAL);
    CHECK(http_parse(big, 1024, &lim, &r) == HTTP_ERROR && r.status == 431);
    CHECK(http_parse(big, sizeof big, &lim, &r) == HTTP_ERROR && r.status == 431);
    /* too many header fields */
    strbuf s = {0};
    sb_puts(&s, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < HTTP_MAX_HEADERS + 1; i++) sb_puts(&s, "A: b\r\n");
    sb_puts(&s, "\r\n");
    http_limits wide = {1 << 16, 10};
    CHECK(http_parse(s.p, s.len, &wide, &r) == HTTP_ERROR && r.status == 431);
    CHECK_ERR(r.error, "too many header fields");
    sb_free(&s);
}

/* Decodes a chunked body fed in pieces of `step` bytes. */
static int dechunk(const char *s, size_t step, size_t max, strbuf *body, size_t *total, int *status, const char **why) {
    http_dechunk d = {0};
    size_t n = strlen(s), off = 0;
    int rc = HTTP_PARTIAL;
    body->len = 0;
    while (off < n && rc == HTTP_PARTIAL) {
        size_t k = n - off < step ? n - off : step, used;
        rc = http_dechunk_feed(&d, s + off, k, max, body, &used, status, why);
        if (used > k) return -99;
        off += used;
        if (rc == HTTP_PARTIAL && used != k) return -98; /* partial must consume everything */
    }
    *total = off;
    return rc;
}

static void test_chunked(void) {
    http_req r;
    const char *head = "POST /tokenize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n";
    CHECK(parse(head, &r) == HTTP_HEAD && r.chunked && r.head_len == strlen(head) && r.content_length == 0);
    const char *good = "5\r\nhello\r\nB;ext=1\r\n, world! 12\r\n0\r\nX-Trailer: t\r\n\r\nGET";
    strbuf b = {0};
    int st = 0;
    const char *why = NULL;
    size_t total;
    for (size_t step = 1; step <= strlen(good); step += step < 4 ? 1 : 7) {
        int rc = dechunk(good, step, 100, &b, &total, &st, &why);
        CHECKF(rc == HTTP_DONE, "step %zu: rc %d", step, rc);
        CHECKF(b.len == 16 && !memcmp(b.p, "hello, world! 12", 16), "step %zu: body '%.*s'", step, (int)b.len, b.p);
        CHECKF(total == strlen(good) - 3, "step %zu: consumed %zu", step, total); /* "GET" is the next request */
    }
    CHECK(dechunk("0\r\n\r\n", 100, 100, &b, &total, &st, &why) == HTTP_DONE && b.len == 0 && total == 5);
    CHECK(dechunk("3\nabc\n0\n\n", 2, 100, &b, &total, &st, &why) == HTTP_DONE && b.len == 3); /* bare LF */
    /* a bare LF after an extension ends its line too (the trailer's empty line was read as more trailer) */
    CHECK(dechunk("3;e\nabc\n0;x\n\n", 2, 100, &b, &total, &st, &why) == HTTP_DONE && b.len == 3);
    CHECK(dechunk("5\r\nhel", 100, 100, &b, &total, &st, &why) == HTTP_PARTIAL && b.len == 3);
#define DC_BAD(in, status, msg)                                                             \
    do {                                                                                   \
        int rc_ = dechunk(in, 3, 100, &b, &total, &st, &why);                              \
        CHECKF(rc_ == HTTP_ERROR && st == status, "'%s': rc %d status %d", in, rc_, st);   \
        if (rc_ == HTTP_ERROR) CHECK_ERR(why, msg);                                        \
    } while (0)
    DC_BAD("x\r\n", 400, "malformed chunk size");
    DC_BAD("\r\n", 400, "malformed chunk size");
    DC_BAD("5 \r\nhello\r\n", 400, "malformed chunk size");
    DC_BAD("3\r\nabcd\r\n", 400, "chunk data longer than its size");
    DC_BAD("3\r\nabc\rx", 400, "chunk data longer than its size");
    DC_BAD("65\r\n", 413, "too large"); /* 101 > 100 */
    DC_BAD("40\r\n" "0123456789012345678901234567890123456789012345678901234567890123\r\n40\r\n", 413, "too large");
    DC_BAD("ffffffffffffffffffff\r\n", 413, "too large");
    DC_BAD("1\rx", 400, "malformed chunk size line");
    DC_BAD("0\r\nA: \x01\r\n\r\n", 400, "malformed chunk trailer");
    DC_BAD("0\r\n\rx", 400, "malformed chunk trailer");
#undef DC_BAD
    strbuf longext = {0};
    sb_puts(&longext, "1;");
    for (int i = 0; i < 1100; i++) sb_putc(&longext, 'e');
    CHECK(dechunk(sb_cstr(&longext), 50, 100, &b, &total, &st, &why) == HTTP_ERROR && st == 400);
    sb_free(&longext);
    /* the raw bytes are kept until the request is done: a trailer of many
     * short lines, or extensions on 1-byte chunks, once grew the input
     * buffer without bound (1 GB in 8 s) while the body stayed small */
    strbuf trailer = {0};
    sb_puts(&trailer, "0\r\n");
    for (int i = 0; i < 400; i++) sb_puts(&trailer, "X-a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n");
    CHECK(dechunk(sb_cstr(&trailer), 997, 100, &b, &total, &st, &why) == HTTP_ERROR && st == 400);
    CHECK_ERR(why, "chunk trailer too long");
    CHECK(total > 16384 && total < 16384 + 100);
    sb_free(&trailer);
    strbuf ext = {0};
    for (int i = 0; i < 700; i++) sb_puts(&ext, "1;eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee\r\n{\r\n");
    CHECK(dechunk(sb_cstr(&ext), 4096, 1000, &b, &total, &st, &why) == HTTP_ERROR && st == 413);
    CHECK_ERR(why, "chunked request framing too large");
    CHECK(b.len < 1000 && total <= 1000 + 65536 + 1000);
    sb_free(&ext);
    sb_free(&b);
}

static void test_heads(void) {
    strbuf o = {0};
    http_head(&o, 200, "application/json", 12, 1, "X-A: b\r\n");
    CHECK(!strcmp(sb_cstr(&o), "HTTP/1.1 200 OK\r\nServer: gem\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
                               "Connection: keep-alive\r\nX-A: b\r\n\r\n"));
    o.len = 0;
    http_head(&o, 503, NULL, -1, 0, NULL);
    CHECK(!strcmp(sb_cstr(&o), "HTTP/1.1 503 Service Unavailable\r\nServer: gem\r\nTransfer-Encoding: chunked\r\n"
                               "Connection: close\r\n\r\n"));
    o.len = 0;
    http_head(&o, 204, NULL, 0, 1, NULL);
    CHECK(!strstr(sb_cstr(&o), "Content-Length") && !strstr(sb_cstr(&o), "chunked"));
    o.len = 0;
    http_chunk(&o, "hello world, this is 26 b.", 26);
    http_chunk(&o, NULL, 0);
    CHECK(!strcmp(sb_cstr(&o), "1a\r\nhello world, this is 26 b.\r\n0\r\n\r\n"));
    sb_free(&o);
    CHECK(!strcmp(http_reason(431), "Request Header Fields Too Large"));
}

int main(void) {
    test_complete();
    test_keep_alive();
    test_partial();
    test_errors();
    test_host();
    test_limits();
    test_chunked();
    test_heads();
    return test_report("test_http");
}
