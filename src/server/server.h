/* `gem serve`: the OpenAI-compatible HTTP/SSE server (sockets, threads, the
 * engine worker). See server.c for the threading model. */
#ifndef GEM_SERVER_SERVER_H
#define GEM_SERVER_SERVER_H

#include <stddef.h>

#include "model/gemma4_kvplan.h"

/* Bodies this small are admitted whatever --max-inflight holds, so small
 * requests keep flowing while large uploads fill the budget. */
#define SERVER_FREE_BODY ((size_t)64 << 10)

/* The prompt cache's default bound in MiB (llama-server's --cache-ram). */
#define SERVER_CACHE_RAM_MIB 8192

typedef struct {
    const char *model_path;
    const char *alias;      /* the model id clients see; NULL: the file's base name */
    const char *host;       /* "127.0.0.1" */
    int port;               /* 0: any free port (the log line names it) */
    const char *backend;    /* "cpu" */
    gemma4_kv_type kv_type; /* --kv-type */
    int n_ctx, threads;
    int shards;             /* --gpus / -tp: each layer over this many shards (0, 1: none) */
    const char *api_key;    /* NULL: no authentication */
    const char *cors;       /* Access-Control-Allow-Origin, or NULL */
    /* --allow-host: comma-separated Host names a loopback-bound server
     * accepts beside localhost and loopback addresses (NULL: none) */
    const char *allow_host;
    size_t max_body;        /* request body limit in bytes */
    /* request body bytes held at once over all connections (received,
     * parsed or waiting for the engine); bodies up to SERVER_FREE_BODY do
     * not count. A body that would pass it is refused (503) unread. */
    size_t max_inflight;
    int queue;              /* requests waiting for the engine beyond the running one */
    /* open connections at most: one more that sends a complete request
     * head within a second takes the place of the one idle, or receiving
     * its request, longest (for at least a second); else it is answered
     * 503 and closed */
    int max_conns;
    double header_timeout;  /* seconds for a request head to arrive (a new connection's: from accept) */
    double read_timeout;    /* seconds for a whole request, head and body, to arrive */
    double idle_timeout;    /* seconds a keep-alive connection may sit idle */
    double send_timeout;    /* seconds a blocked send may wait for the client */
    double heartbeat;       /* seconds between SSE comments during a prefill */
    double shutdown_grace;  /* seconds a running answer may go on after SIGTERM (0: ended at once) */
    int test_hooks;         /* accept the test-only request field gem_forced_output */
    const char *version;    /* build info */
    const char *chat_template; /* the template text /props reports, or NULL */
    const char *mtp_path;   /* --mtp: the MTP drafter, or NULL */
    int draft_max, draft_min; /* -1: the engine's defaults */
    double draft_p_min, draft_p_prod; /* < 0: the engine's defaults */
    int draft_fixed;        /* draft draft_max every round */
    int parallel;           /* slots: sessions that run requests at once (0: 1) */
    /* --cache-ram: MiB of host memory for parked slot states (the prompt
     * cache, pcache.h); 0: off; < 0: SERVER_CACHE_RAM_MIB, or half of
     * MemAvailable at start when that is less */
    long cache_ram_mib;
} server_opts;

/* Serves until SIGINT or SIGTERM. Returns the process exit status; errors
 * (bind, model load) are printed to stderr as "gem serve: error: ...". */
int server_run(const server_opts *o);

#endif
