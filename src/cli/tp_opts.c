/* The tensor-parallel options run, chat, serve and bench share
 * (docs/cli.md, docs/tensor-parallel.md): --gpus N and
 * -tp/--tensor-parallel-size N, resolved into the engine's shard count.
 * --gpus names the hardware (N CUDA GPUs, checked present before anything
 * loads); -tp names the split on any backend (on the CPU, N in-process
 * shards: the sharded arithmetic, testable anywhere). */
#include <stdio.h>
#include <string.h>

#include "backend/device.h"
#include "cli/cli.h"

void cli_tp_init(cli_tp *t) { t->gpus = t->tp = 0; }

int cli_tp_arg(const char *cmd, cli_tp *t, const char *a, const char *v, int *used) {
    int *dst = !strcmp(a, "--gpus") ? &t->gpus
               : !strcmp(a, "-tp") || !strcmp(a, "--tensor-parallel-size") ? &t->tp
                                                                             : NULL;
    if (!dst) return 0;
    double x;
    if (cli_parse_num(v, 1, 8, &x) || x != (int)x) {
        fprintf(stderr, "gem %s: error: %s takes a whole number of devices, 1 to 8: '%s'\n", cmd, a, v ? v : "");
        return -1;
    }
    *dst = (int)x;
    *used = 2;
    return 1;
}

int cli_tp_resolve(const char *cmd, const cli_tp *t, const char **backend, int *shards) {
    *shards = t->tp ? t->tp : 1;
    if (!t->gpus) return 0;
    if (t->tp && t->tp != t->gpus) {
        fprintf(stderr, "gem %s: error: --gpus %d and --tensor-parallel-size %d disagree (one shard per GPU)\n", cmd,
                t->gpus, t->tp);
        return -1;
    }
    if (*backend && strcmp(*backend, "cuda")) {
        fprintf(stderr, "gem %s: error: --gpus needs --backend cuda; on '%s', -tp N splits each layer over N "
                "in-process shards\n", cmd, *backend);
        return -1;
    }
    *backend = "cuda";
    gem_err err = {{0}};
    const int n = backend_devices("cuda", NULL, &err);
    if (n < 0) {
        fprintf(stderr, "gem %s: error: --gpus %d: %s\n", cmd, t->gpus, err.msg);
        return -1;
    }
    if (n < t->gpus) {
        fprintf(stderr, "gem %s: error: --gpus %d: %d CUDA GPU%s present\n", cmd, t->gpus, n, n == 1 ? "" : "s");
        return -1;
    }
    *shards = t->gpus;
    return 0;
}
