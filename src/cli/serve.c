/* gem serve: option parsing for the OpenAI-compatible server (src/server).
 * Binds 127.0.0.1 unless told otherwise; --port 0 picks a free port, which
 * the "listening on" line on stderr names (the tests rely on it). The API
 * key comes from --api-key, --api-key-file or GEM_API_KEY (the last two
 * keep it out of ps). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/server.h"
#include "util/file.h"
#include "util/sysmem.h"

static const char help[] =
    "gem serve: an OpenAI-compatible HTTP/1.1 server (chat and text completions, SSE streaming, /tokenize,\n"
    "/detokenize, /props, /health, /metrics, /slots, Anthropic's /v1/messages) for one model: --parallel\n"
    "requests at once (their decode steps batched), more waiting in a bounded queue.\n"
    "\n"
    "  -m, --model FILE      the GGUF model (default: the embedded demo model)\n"
    "  --alias NAME          the model id clients see (default: the file's base name)\n"
    "  --host ADDR           address to bind (default 127.0.0.1; 0.0.0.0 for every interface)\n"
    "  --port N              TCP port (default 8080; 0: a free one, named on stderr)\n"
    "  --backend cpu|cuda    compute backend (default cpu)\n"
    "  --gpus N              split each layer over N CUDA GPUs (tensor parallelism)\n"
    "  -tp, --tensor-parallel-size N\n"
    "                        split each layer over N shards (on the CPU: in-process)\n"
    "  --kv-type T           KV cache entries: f32 (default), f16, or f16-full (sliding layers' rings f32,\n"
    "                        the full-attention caches f16); f16 and f16-full: CUDA only\n"
    "  -c, --ctx N           context tokens (default 4096, at most the model's trained context; refused\n"
    "                        before loading when its KV plan does not fit: gem inspect FILE --ctx N)\n"
    "  -t, --threads N       CPU threads (default: the cores)\n"
    "  --api-key KEY         require 'Authorization: Bearer KEY' on every route but /health\n"
    "  --api-key-file FILE   the key from FILE (its first line), not visible in ps\n"
    "                        (without either: the GEM_API_KEY environment variable, if set)\n"
    "  --cors ORIGIN         send Access-Control-Allow-Origin: ORIGIN\n"
    "  --allow-host NAME,..  Host names a loopback-bound server accepts beside localhost and\n"
    "                        loopback addresses (a DNS-rebinding guard)\n"
    "  --max-body BYTES      request body limit (default 8 MiB)\n"
    "  --max-inflight BYTES  request bodies held at once over all connections, from head to answer\n"
    "                        (default 4 x --max-body); a body that would pass it gets 503 unread;\n"
    "                        bodies up to 64 KiB always pass\n"
    "  -np, --parallel N     slots: requests that run at once (default 1, at most 64). Each slot is a\n"
    "                        session with its own KV caches for --ctx tokens (the memory grows with N);\n"
    "                        a request goes to the free slot holding the longest prefix of its prompt\n"
    "  --cache-ram MiB       host memory for the prompt cache (default 8192, at most half of the memory\n"
    "                        available at start; 0: off): a slot given to another conversation parks its\n"
    "                        state there first, and a request continues the parked state that keeps more\n"
    "                        of its prompt than its slot would (least recently used states evicted)\n"
    "  --queue N             requests that may wait beyond the running ones (default 16; more: 503)\n"
    "  --max-conns N         open connections (default 128); past them, a new connection that sends a\n"
    "                        complete request head within 1 s takes the place of the one idle, or\n"
    "                        receiving its request, longest (for at least 1 s; that one gets 408);\n"
    "                        else it gets 503 and is closed\n"
    "  --header-timeout S    seconds for a request's head to arrive (default 10; a new connection's\n"
    "                        from accept)\n"
    "  --timeout S           seconds for a whole request, head and body, to arrive (default 30)\n"
    "  --idle-timeout S      seconds an idle keep-alive connection stays open (default 60)\n"
    "  --send-timeout S      seconds a blocked send may wait for the client (default 30)\n"
    "  --heartbeat S         seconds between SSE comments while queued or prefilling (default 5; 0: none)\n"
    "  --shutdown-grace S    on SIGTERM or SIGINT, seconds the running answer may still take (default 0);\n"
    "                        then it ends with an error (a stream: an error event and [DONE]); queued\n"
    "                        requests get 503; a second signal ends the grace at once\n"
    "  --mtp FILE            an MTP drafter for speculative decoding (answers unchanged)\n"
    "  --draft-max N         drafts per round at most (0-15, default 8)\n"
    "  --draft-min N         rounds that would draft fewer decode plainly\n"
    "  --draft-p-min P       stop a round after a proposal less likely than P (default 0)\n"
    "  --draft-p-prod P      stop a round once the product of its proposals' probabilities is below P\n"
    "                        (default 0.1)\n"
    "  --draft-fixed         draft --draft-max every round (benchmarks)\n"
    "  --test-hooks          tests only: accept the request field gem_forced_output\n"
    "\n"
    "POST bodies must be sent as 'Content-Type: application/json'. Every route and field: docs/cli.md.\n";

static int usage(void) {
    fprintf(stderr,
            "usage: gem serve -m FILE [--host 127.0.0.1] [--port 8080] [--backend cpu|cuda] [--kv-type f32|f16|f16-full]\n"
            "                 [--ctx N] [-t THREADS]\n"
            "                 [--api-key KEY | --api-key-file FILE] [--cors ORIGIN] [--allow-host NAME,...]\n"
            "                 [--max-body BYTES] [--max-inflight BYTES] [--alias NAME]\n"
            "                 [--parallel N] [--cache-ram MiB] [--queue N]\n"
            "                 [--max-conns N] [--header-timeout S] [--timeout S] [--idle-timeout S] [--send-timeout S]\n"
            "                 [--heartbeat S]\n"
            "                 [--shutdown-grace S]\n"
            "                 [--mtp FILE] [--draft-max N] [--draft-min N] [--draft-p-min P] [--draft-p-prod P] [--draft-fixed]\n"
            "                 [--test-hooks]\n");
    return 2;
}

int cli_serve(int argc, char **argv) {
    server_opts o = {0};
    o.host = "127.0.0.1";
    o.port = 8080;
    o.max_body = 8 << 20;
    o.queue = 16;
    o.cache_ram_mib = -1;
    o.max_conns = 128;
    o.header_timeout = 10;
    o.read_timeout = 30;
    o.idle_timeout = 60;
    o.send_timeout = 30;
    o.heartbeat = 5;
    o.version = cli_version();
    char mbuf[4096], tbuf[4096];
    const char *key_file = NULL;
    cli_mtp mtp;
    cli_mtp_init(&mtp);
    cli_tp tp;
    cli_tp_init(&tp);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        int bad = 0, used, mr = cli_mtp_arg("serve", &mtp, a, v, &used);
        if (mr < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if ((mr = cli_tp_arg("serve", &tp, a, v, &used)) < 0) return 2;
        if (mr > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { bad = !v; o.model_path = v; i++; }
        else if (!strcmp(a, "--alias")) { bad = !v || !*v; o.alias = v; i++; }
        else if (!strcmp(a, "--host")) { bad = !v || !*v; o.host = v; i++; }
        else if (!strcmp(a, "--port")) { bad = cli_parse_num(v, 0, 65535, &x) || x != (int)x; o.port = (int)x; i++; }
        else if (!strcmp(a, "--backend")) { bad = !v; o.backend = v; i++; }
        else if (!strcmp(a, "--kv-type")) { if (cli_kv_type_arg("serve", v, &o.kv_type)) return 2; i++; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) { bad = cli_parse_num(v, 16, 1 << 24, &x) || x != (int)x; o.n_ctx = (int)x; i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { bad = cli_parse_num(v, 1, 1024, &x) || x != (int)x; o.threads = (int)x; i++; }
        else if (!strcmp(a, "--api-key")) { bad = !v || !*v; o.api_key = v; i++; }
        else if (!strcmp(a, "--api-key-file")) { bad = !v || !*v; key_file = v; i++; }
        else if (!strcmp(a, "--cors")) { bad = !v || !*v || strpbrk(v, "\r\n"); o.cors = v; i++; }
        else if (!strcmp(a, "--allow-host")) { bad = !v || !*v || strpbrk(v, " \t\r\n"); o.allow_host = v; i++; }
        else if (!strcmp(a, "--max-body")) { bad = cli_parse_num(v, 1024, 1 << 30, &x) || x != (int)x; o.max_body = (size_t)x; i++; }
        else if (!strcmp(a, "--max-inflight")) { bad = cli_parse_num(v, 1024, 1ull << 40, &x) || x != (double)(size_t)x; o.max_inflight = (size_t)x; i++; }
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) { bad = cli_parse_num(v, 1, 64, &x) || x != (int)x; o.parallel = (int)x; i++; }
        else if (!strcmp(a, "--cache-ram")) {
            if (cli_parse_num(v, 0, 1 << 30, &x) || x != (long)x) {
                fprintf(stderr, "gem serve: error: --cache-ram takes whole MiB of host memory, 0 (off) to %d: '%s'\n",
                        1 << 30, v ? v : "");
                return 2;
            }
            o.cache_ram_mib = (long)x;
            i++;
        }
        else if (!strcmp(a, "--queue")) { bad = cli_parse_num(v, 1, 4096, &x) || x != (int)x; o.queue = (int)x; i++; }
        else if (!strcmp(a, "--max-conns")) { bad = cli_parse_num(v, 1, 65536, &x) || x != (int)x; o.max_conns = (int)x; i++; }
        else if (!strcmp(a, "--header-timeout")) { bad = cli_parse_num(v, 0.1, 86400, &x); o.header_timeout = x; i++; }
        else if (!strcmp(a, "--timeout")) { bad = cli_parse_num(v, 0.1, 86400, &x); o.read_timeout = x; i++; }
        else if (!strcmp(a, "--idle-timeout")) { bad = cli_parse_num(v, 0.1, 86400, &x); o.idle_timeout = x; i++; }
        else if (!strcmp(a, "--send-timeout")) { bad = cli_parse_num(v, 0.1, 86400, &x); o.send_timeout = x; i++; }
        else if (!strcmp(a, "--heartbeat")) { bad = cli_parse_num(v, 0, 86400, &x); o.heartbeat = x; i++; }
        else if (!strcmp(a, "--shutdown-grace")) { bad = cli_parse_num(v, 0, 3600, &x); o.shutdown_grace = x; i++; }
        else if (!strcmp(a, "--test-hooks")) o.test_hooks = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(help, stdout); return 0; }
        else {
            fprintf(stderr, "gem serve: error: unknown option '%s'\n", a);
            return usage();
        }
        if (bad) {
            fprintf(stderr, "gem serve: error: bad value for %s: '%s'\n", a, v ? v : "");
            return 2;
        }
    }
    if (cli_tp_resolve("serve", &tp, &o.backend, &o.shards)) return 2;
    if (!o.max_inflight) o.max_inflight = 4 * o.max_body;
    uint64_t avail;
    if (o.cache_ram_mib > 0 && !sysmem_available(&avail) && ((uint64_t)o.cache_ram_mib << 20) > avail) {
        fprintf(stderr, "gem serve: error: --cache-ram %ld MiB is more than this machine's available memory (%llu MiB)\n",
                o.cache_ram_mib, (unsigned long long)(avail >> 20));
        return 2;
    }
    if (o.max_inflight < o.max_body) {
        fprintf(stderr, "gem serve: error: --max-inflight %zu is below --max-body %zu: a body that large could never be "
                        "admitted\n", o.max_inflight, o.max_body);
        return 2;
    }
    char *key_buf = NULL;
    if (o.api_key && key_file) {
        fprintf(stderr, "gem serve: error: --api-key and --api-key-file both given: use one\n");
        return 2;
    }
    if (key_file || (!o.api_key && getenv("GEM_API_KEY"))) {
        const char *what = key_file ? key_file : "GEM_API_KEY";
        gem_err err = {{0}};
        size_t n = 0;
        key_buf = key_file ? file_read(key_file, 0, &n, &err) : strdup(getenv("GEM_API_KEY"));
        if (!key_buf) {
            fprintf(stderr, "gem serve: error: --api-key-file: %s\n", err.msg[0] ? err.msg : "out of memory");
            return 1;
        }
        /* the first line, without a byte-order mark or blanks around it */
        size_t from = !strncmp(key_buf, "\xEF\xBB\xBF", 3) ? 3 : 0;
        while (key_buf[from] == ' ' || key_buf[from] == '\t') from++;
        memmove(key_buf, key_buf + from, strlen(key_buf + from) + 1);
        n = strcspn(key_buf, "\r\n");
        while (n && (key_buf[n - 1] == ' ' || key_buf[n - 1] == '\t')) n--;
        key_buf[n] = 0;
        int ctl = 0;
        for (size_t i = 0; i < n; i++) ctl |= (unsigned char)key_buf[i] < 0x20 || key_buf[i] == 0x7f;
        if (!n || ctl) {
            fprintf(stderr, "gem serve: error: the API key from %s is %s\n", what, n ? "not printable text" : "empty");
            free(key_buf);
            return 2;
        }
        o.api_key = key_buf;
    }
    if (!o.model_path) o.model_path = cli_data_path("models/default.gguf", mbuf, sizeof mbuf);
    /* a server's drafter is named, never found beside the model */
    char mtp_buf[8];
    o.mtp_path = cli_mtp_path(&mtp, o.model_path, 0, mtp_buf, sizeof mtp_buf);
    o.draft_max = mtp.draft_max;
    o.draft_min = mtp.draft_min;
    o.draft_p_min = mtp.p_min;
    o.draft_p_prod = cli_mtp_p_prod(&mtp);
    o.draft_fixed = mtp.fixed;
    /* the text /props reports; NULL when the file is missing or empty */
    size_t tlen = 0;
    char *tpl = file_read(cli_data_path("templates/google-gemma-4-31B-it.jinja", tbuf, sizeof tbuf), 0, &tlen, NULL);
    o.chat_template = tlen ? tpl : NULL;
    int rc = server_run(&o);
    free(tpl);
    free(key_buf);
    return rc;
}
