/* engine/spec_policy: the draft count from measured costs and acceptance,
 * on synthetic timings (the policy reads no clock itself). */
#include "engine/spec_policy.h"
#include "test.h"

/* one generation's worth of rounds against a model of the costs: plain
 * step 1 s, draft step d, verification of n rows 1 + v (n - 1); drafts
 * accepted while i < accept_upto (deterministic) */
static int settle(spec_policy *p, double d, double v, int accept_upto, int steps) {
    int k = -1;
    for (int i = 0; i < steps; i++) {
        k = spec_policy_choose(p, 16);
        if (k == 0) spec_policy_plain(p, 1.0);
        else spec_policy_round(p, k, k < accept_upto ? k : accept_upto, k * d, 1.0 + v * k);
    }
    return k;
}

int main(void) {
    spec_policy p;
    /* fixed: always draft_max, capped by the room left */
    spec_policy_init(&p, 1, 8, 1);
    CHECK(spec_policy_choose(&p, 16) == 8);
    CHECK(spec_policy_choose(&p, 5) == 5);
    CHECK(spec_policy_choose(&p, 0) == 0);
    /* measuring: short rounds until a draft step's time is known (the
     * first sample is discarded), then plain steps until a plain step's is */
    spec_policy_init(&p, 1, 8, 0);
    CHECK(spec_policy_choose(&p, 16) == 3);
    spec_policy_round(&p, 3, 3, 30.0, 30.0); /* one-time work: discarded */
    CHECK(spec_policy_choose(&p, 16) == 3);
    spec_policy_round(&p, 3, 3, 0.03, 1.15);
    CHECK(spec_policy_choose(&p, 16) == 0);
    spec_policy_plain(&p, 50.0);
    CHECK(spec_policy_choose(&p, 16) == 0);
    spec_policy_plain(&p, 1.0);
    /* cheap drafts, every one accepted, verification nearly free: rounds
     * grow to draft_max */
    CHECKF(settle(&p, 0.01, 0.05, 99, 40) == 8, "cheap and always right: %d", spec_policy_choose(&p, 16));
    CHECK(spec_policy_choose(&p, 4) == 4); /* never past the room left */
    /* a drafter as slow as the target whose drafts are never right: plain
     * steps, with a probe round every SPEC_POLICY_PROBE of them */
    spec_policy_init(&p, 1, 8, 0);
    settle(&p, 1.0, 0.3, 0, 60);
    int rounds = 0, plain = 0;
    for (int i = 0; i < 4 * SPEC_POLICY_PROBE; i++) {
        const int k = spec_policy_choose(&p, 16);
        if (k == 0) {
            spec_policy_plain(&p, 1.0);
            plain++;
        }
        else {
            CHECK(k == 1);
            spec_policy_round(&p, k, 0, k * 1.0, 1.3);
            rounds++;
        }
    }
    CHECKF(rounds >= 3 && rounds <= 5 && plain >= 4 * SPEC_POLICY_PROBE - 5, "useless drafter: %d rounds, %d plain",
           rounds, plain);
    /* two of three drafts right, verification at 0.25 a row: a few drafts
     * pay (expected tokens 1 + a + a^2 ... against 1 + 0.25 k), many don't */
    spec_policy_init(&p, 1, 8, 0);
    int k = settle(&p, 0.02, 0.25, 2, 80);
    CHECKF(k >= 1 && k <= 3, "half-good drafter: k %d", k);
    /* draft_min above what pays or fits: plain; the measuring rounds never
     * draft fewer than draft_min */
    spec_policy_init(&p, 4, 8, 0);
    CHECK(spec_policy_choose(&p, 3) == 0);
    CHECK(spec_policy_choose(&p, 16) == 4);
    spec_policy_init(&p, 6, 8, 0);
    CHECK(spec_policy_choose(&p, 16) == 6);
    /* rounds that keep winning still take a plain step every
     * SPEC_POLICY_REPLAIN of them, so a plain step's time stays current */
    spec_policy_init(&p, 1, 8, 0);
    settle(&p, 0.01, 0.05, 99, 40);
    int plains = 0;
    for (int i = 0; i < 3 * SPEC_POLICY_REPLAIN + 3; i++) {
        const int kk = spec_policy_choose(&p, 16);
        if (kk == 0) {
            spec_policy_plain(&p, 1.0);
            plains++;
        } else {
            spec_policy_round(&p, kk, kk, kk * 0.01, 1.0 + 0.05 * kk);
        }
    }
    CHECKF(plains == 3, "%d plain steps in %d choices", plains, 3 * SPEC_POLICY_REPLAIN + 3);
    /* a session keeps its policy while the settings stay */
    CHECK(spec_policy_same(&p, 1, 8, 0) && spec_policy_same(&p, 0, 8, 0));
    CHECK(!spec_policy_same(&p, 2, 8, 0) && !spec_policy_same(&p, 1, 7, 0) && !spec_policy_same(&p, 1, 8, 1));
    return test_report("engine/spec_policy");
}
