/* How many tokens each speculative round drafts: the one owner of that
 * decision (generate.c asks it before every round and reports back).
 *
 * The count that maximises expected tokens per second, from what this
 * generation measured: the time of a plain decode step, of a draft step,
 * of a verification of n rows, and the drafter's acceptance rate at each
 * draft position (the chance draft i is accepted when the ones before it
 * were). A round of k drafts yields 1 + sum_{i<=k} prod_{j<=i} a_j tokens
 * and costs k draft steps plus one verification of k+1 rows; a plain step
 * yields one token. k = 0 (a plain step) is chosen where no round pays,
 * as with a drafter much slower or much worse than the target can afford;
 * a probe round every SPEC_POLICY_PROBE plain steps keeps the acceptance
 * rates current, and a plain step every SPEC_POLICY_REPLAIN rounds keeps a
 * plain step's time current (it grows with depth, as verifications do).
 * A session keeps its policy across generations while the settings stay. Answers never depend on the count (verification is
 * exact), only speed does.
 *
 * The first sample of each time is discarded: it carries one-time work
 * (a GPU's graph capture of that shape). Until a time is known the policy
 * measures it: rounds of (at most) 3 drafts first, then plain steps. A fixed
 * policy (benchmarks, --draft-fixed) always drafts k_hi. */
#ifndef GEM_ENGINE_SPEC_POLICY_H
#define GEM_ENGINE_SPEC_POLICY_H

#define SPEC_POLICY_MAX 16   /* drafts per round at most */
#define SPEC_POLICY_PROBE 32 /* plain steps between probe rounds */
#define SPEC_POLICY_REPLAIN 64 /* rounds between plain steps that re-measure one */

typedef struct {
    double t;  /* seconds (EMA) */
    int n;     /* samples seen (the first discarded) */
} spec_time;

typedef struct {
    int k_lo, k_hi, fixed;
    spec_time plain, draft, verify[SPEC_POLICY_MAX + 2];
    /* draft position i+1: rounds that reached it, and accepted it (decayed) */
    double tried[SPEC_POLICY_MAX], hits[SPEC_POLICY_MAX];
    int idle;                    /* plain steps since the last round */
    int streak;                  /* rounds since the last plain step */
} spec_policy;

void spec_policy_init(spec_policy *p, int k_lo, int k_hi, int fixed);
/* p was made with these settings (what it measured still applies) */
int spec_policy_same(const spec_policy *p, int k_lo, int k_hi, int fixed);
/* drafts for the next round, at most k_max (the answer's room): 0 means a
 * plain step */
int spec_policy_choose(spec_policy *p, int k_max);
/* a plain step took s seconds */
void spec_policy_plain(spec_policy *p, double s);
/* a round drafted m tokens in draft_s seconds, verified m+1 rows in
 * verify_s and accepted acc of the drafts */
void spec_policy_round(spec_policy *p, int m, int acc, double draft_s, double verify_s);

#endif
