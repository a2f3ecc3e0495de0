/* What the long file commands (gem convert, quantize, synth) say on
 * stderr: usage errors, one progress bar, the wall time from one clock,
 * and an error that first ends a half-drawn bar (see cli.h). */
#include <stdio.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/clock.h"

#define BAR 40

static void draw(uint64_t done, uint64_t total, void *ctx) {
    cli_progress *p = ctx;
    int permille = total ? (int)(done * 1000 / total) : 1000;
    if (permille == p->last) return;
    p->last = permille;
    char bar[BAR + 1];
    int fill = permille * BAR / 1000;
    for (int i = 0; i < BAR; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR] = 0;
    fprintf(stderr, "\rgem %s: [%s] %5.1f%%", p->cmd, bar, permille / 10.0);
    if (permille == 1000) fprintf(stderr, "\n");
}

void cli_progress_start(cli_progress *p, const char *cmd, cli_progress_fn *fn, void **ctx) {
    p->cmd = cmd;
    p->last = -1;
    /* a bar redrawn in place only makes sense on a terminal */
    *fn = isatty(2) ? draw : NULL;
    *ctx = *fn ? p : NULL;
    p->t0 = gem_now_s();
}

double cli_progress_seconds(const cli_progress *p) { return gem_now_s() - p->t0; }

void cli_prefill_init(cli_prefill *p, const char *cmd) {
    p->cmd = cmd;
    p->on = isatty(2);
    p->drawn = 0;
    p->from = -1;
    p->t0 = 0;
}

void cli_prefill_draw(void *ctx, long done, long total) {
    cli_prefill *p = ctx;
    if (!p->on) return;
    if (p->from < 0) { /* the first call: where this prompt's evaluation starts */
        p->from = done;
        p->t0 = gem_now_s();
    }
    if (total - p->from < CLI_PREFILL_BAR_MIN) return;
    if (done >= total) { /* the prompt is in: the line goes, the answer follows */
        if (p->drawn) fprintf(stderr, "\r\033[K");
        p->drawn = 0;
        return;
    }
    const double dt = gem_now_s() - p->t0;
    const long did = done - p->from;
    const int permille = (int)(done * 1000 / total);
    char bar[BAR + 1];
    for (int i = 0; i < BAR; i++) bar[i] = i < permille * BAR / 1000 ? '#' : '.';
    bar[BAR] = 0;
    fprintf(stderr, "\rgem %s: prompt [%s] %5.1f%% %ld/%ld tokens", p->cmd, bar, permille / 10.0, done, total);
    if (did > 0 && dt > 0) /* the rate once a tile is in */
        fprintf(stderr, ", %.0f tok/s, ETA %.0f s", did / dt, (double)(total - done) * dt / (double)did);
    fprintf(stderr, "\033[K");
    p->drawn = 1;
}

int cli_fail(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "gem %s: error: %s%s%s\n", cmd, msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

int cli_progress_fail(const cli_progress *p, const char *msg) {
    if (p->last >= 0 && p->last < 1000) fprintf(stderr, "\n");
    fprintf(stderr, "gem %s: error: %s\n", p->cmd, msg);
    return 1;
}
