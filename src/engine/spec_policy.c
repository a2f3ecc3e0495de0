/* The draft-count policy (see spec_policy.h). */
#include "engine/spec_policy.h"

#define EMA 0.2            /* weight of a new sample */
/* acceptance at a position: its decayed hits over its decayed tries (a
 * window of about 20 rounds: a drafter's acceptance moves with the text,
 * and one round's outcome is a coin toss that must not swing the choice),
 * with a prior of ACC_PRIOR_N tries at the position before's rate
 * (ACC_PRIOR for the first) */
#define ACC_DECAY 0.95
#define ACC_PRIOR 0.75
#define ACC_PRIOR_N 2.0
/* drafts of the measuring rounds: few, so a poor drafter costs little
 * before the policy knows it; longer rounds follow if these pay */
#define SPEC_POLICY_FIRST 3

static void time_add(spec_time *t, double s) {
    if (++t->n <= 2) t->t = s; /* the first is one-time work; the second starts the average */
    else t->t += EMA * (s - t->t);
}

static int known(const spec_time *t) { return t->n >= 2; }

void spec_policy_init(spec_policy *p, int k_lo, int k_hi, int fixed) {
    *p = (spec_policy){0};
    p->k_lo = k_lo < 1 ? 1 : k_lo;
    p->k_hi = k_hi > SPEC_POLICY_MAX ? SPEC_POLICY_MAX : k_hi;
    p->fixed = fixed;
}

int spec_policy_same(const spec_policy *p, int k_lo, int k_hi, int fixed) {
    spec_policy q;
    spec_policy_init(&q, k_lo, k_hi, fixed);
    return p->k_lo == q.k_lo && p->k_hi == q.k_hi && p->fixed == q.fixed;
}

void spec_policy_plain(spec_policy *p, double s) {
    time_add(&p->plain, s);
    p->idle++;
    p->streak = 0;
}

void spec_policy_round(spec_policy *p, int m, int acc, double draft_s, double verify_s) {
    if (m <= 0 || m > SPEC_POLICY_MAX) return;
    time_add(&p->draft, draft_s / m);
    time_add(&p->verify[m + 1], verify_s);
    for (int i = 0; i <= acc && i < m; i++) { /* positions the round reached */
        p->tried[i] = ACC_DECAY * p->tried[i] + 1.0;
        p->hits[i] = ACC_DECAY * p->hits[i] + (i < acc);
    }
    p->idle = 0;
    p->streak++;
}

/* Seconds for a verification of n rows: measured, else a line through a
 * plain step (one row) and the measured row count nearest to n. */
static double verify_s(const spec_policy *p, int n) {
    if (known(&p->verify[n])) return p->verify[n].t;
    int best = -1;
    for (int j = 2; j <= SPEC_POLICY_MAX + 1; j++)
        if (known(&p->verify[j]) && (best < 0 || (j > n ? j - n : n - j) < (best > n ? best - n : n - best))) best = j;
    if (best < 0) return p->plain.t * (1.0 + 0.25 * (n - 1));
    double slope = (p->verify[best].t - p->plain.t) / (best - 1);
    if (slope < 0) slope = 0;
    return p->plain.t + slope * (n - 1);
}

int spec_policy_choose(spec_policy *p, int k_max) {
    int hi = p->k_hi < k_max ? p->k_hi : k_max;
    if (hi < p->k_lo) return 0;
    if (p->fixed) return hi;
    if (!known(&p->draft)) { /* measuring a round: a short one, never below draft_min */
        const int k = hi < SPEC_POLICY_FIRST ? hi : SPEC_POLICY_FIRST;
        return k < p->k_lo ? p->k_lo : k;
    }
    if (!known(&p->plain)) return 0;              /* measuring a plain step */
    double best_rate = 1.0 / p->plain.t, tokens = 1.0, chain = 1.0, prior = ACC_PRIOR;
    int best = 0;
    for (int k = 1; k <= hi; k++) {
        /* a position rarely reached leans on the one before it (not on a
         * fixed guess, which would keep longer rounds from being tried) */
        prior = (p->hits[k - 1] + prior * ACC_PRIOR_N) / (p->tried[k - 1] + ACC_PRIOR_N);
        chain *= prior;
        tokens += chain;
        if (k < p->k_lo) continue;
        const double rate = tokens / (k * p->draft.t + verify_s(p, k + 1));
        if (rate > best_rate) best_rate = rate, best = k;
    }
    if (best == 0 && p->idle >= SPEC_POLICY_PROBE) best = p->k_lo; /* keep the rates current */
    if (best > 0 && p->streak >= SPEC_POLICY_REPLAIN) best = 0;     /* and a plain step's time */
    return best;
}
