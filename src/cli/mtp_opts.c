/* The speculative-decoding options of run, chat, serve and bench (cli.h):
 * one parser, so the four commands spell and bound them alike. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

void cli_mtp_init(cli_mtp *m) {
    memset(m, 0, sizeof *m);
    m->draft_max = m->draft_min = -1;
    m->p_min = m->p_prod = -1;
}

int cli_mtp_arg(const char *cmd, cli_mtp *m, const char *a, const char *v, int *used) {
    double x;
    *used = 1;
    if (!strcmp(a, "--no-mtp")) {
        m->off = 1;
        return 1;
    }
    if (!strcmp(a, "--draft-fixed")) {
        m->fixed = 1;
        return 1;
    }
    if (strcmp(a, "--mtp") && strcmp(a, "--draft-max") && strcmp(a, "--draft-min") && strcmp(a, "--draft-p-min") &&
        strcmp(a, "--draft-p-prod"))
        return 0;
    *used = 2;
    if (!v) {
        fprintf(stderr, "gem %s: error: %s needs a value\n", cmd, a);
        return -1;
    }
    if (!strcmp(a, "--mtp")) {
        m->path = v;
        return 1;
    }
    if (!strcmp(a, "--draft-p-min") || !strcmp(a, "--draft-p-prod")) {
        if (cli_parse_num(v, 0, 1, &x)) {
            fprintf(stderr, "gem %s: error: %s wants a probability in [0, 1], not '%s'\n", cmd, a, v);
            return -1;
        }
        *(!strcmp(a, "--draft-p-min") ? &m->p_min : &m->p_prod) = x;
        return 1;
    }
    /* a round verifies the newest token and its drafts in one row-exact
     * tile of at most BE_EXACT_ROWS (16) rows */
    if (cli_parse_num(v, 0, 15, &x) || x != (int)x) {
        fprintf(stderr, "gem %s: error: %s wants a whole number of tokens from 0 to 15, not '%s'\n", cmd, a, v);
        return -1;
    }
    if (!strcmp(a, "--draft-max")) m->draft_max = (int)x;
    else m->draft_min = (int)x;
    /* both given: they must agree (one alone is clamped by the engine) */
    if (m->draft_max >= 0 && m->draft_min > m->draft_max) {
        fprintf(stderr, "gem %s: error: --draft-min %d exceeds --draft-max %d\n", cmd, m->draft_min, m->draft_max);
        return -1;
    }
    return 1;
}

const char *cli_mtp_path(const cli_mtp *m, const char *model, int autodetect, char *buf, size_t cap) {
    if (m->off) return NULL;
    if (m->path) return m->path;
    if (!autodetect || !model) return NULL;
    const char *slash = strrchr(model, '/');
    const size_t dir = slash ? (size_t)(slash - model) + 1 : 0;
    if ((size_t)snprintf(buf, cap, "%.*smtp-%s", (int)dir, model, model + dir) >= cap) return NULL;
    return access(buf, R_OK) == 0 ? buf : NULL;
}

gem_engine *cli_engine_open(const char *cmd, gem_engine_opts *eo, const cli_mtp *m, gem_err *err) {
    gem_engine *e = gem_engine_open(eo, err);
    if (e || !eo->mtp_path || m->path) return e;
    fprintf(stderr, "gem %s: warning: not using %s found beside the model: %s\n", cmd, eo->mtp_path, err->msg);
    eo->mtp_path = NULL;
    return gem_engine_open(eo, err);
}

double cli_mtp_p_prod(const cli_mtp *m) { return m->p_prod >= 0 ? m->p_prod : m->fixed ? 0 : -1; }

void cli_mtp_params(const cli_mtp *m, gem_gen_params *gp) {
    if (m->draft_max >= 0) gp->draft_max = m->draft_max;
    if (m->draft_min >= 0) gp->draft_min = m->draft_min;
    if (m->p_min >= 0) gp->draft_p_min = (float)m->p_min;
    if (cli_mtp_p_prod(m) >= 0) gp->draft_p_prod = (float)cli_mtp_p_prod(m);
    if (m->fixed) gp->draft_fixed = 1;
}

const char *cli_mtp_summary(const gem_gen_result *r, char *buf, size_t cap) {
    buf[0] = 0;
    if (r->n_rounds > 0)
        snprintf(buf, cap, " | mtp: %ld rounds, %ld drafted, %ld accepted (%.1f%%), %.2f tokens per target step",
                 r->n_rounds, r->n_drafted, r->n_accepted, r->n_drafted ? 100.0 * r->n_accepted / r->n_drafted : 0.0,
                 (double)(r->n_accepted + r->n_rounds) / (double)r->n_rounds);
    return buf;
}
