/* The Gemma 4 MTP drafter ("assistant") forward pass, against the seam.
 *
 * A drafter proposes the tokens after the target's newest one from the
 * target's own state: its input is concat(E_target[tok] * sqrt(D), h), D
 * the target width and h the target's final hidden state after the
 * previous token (gemma4_hidden), through nextn.pre_projection; four
 * Gemma 4 blocks whose attention has queries only and reads the target's
 * caches (sliding layers the target's last sliding layer, the full layer
 * its last full layer, keys before the newest token's position); then its
 * own tied embedding as the head (no soft-cap), and nextn.post_projection
 * gives the h of the next draft step. Every step of one round sits at the
 * same position, the newest token's (the reference's shared-memory MTP
 * loop): nothing is written to any cache.
 *
 * The drafter's weights live on the target's backend; it owns its own
 * activation buffers and keeps the last step's h_next there. */
#ifndef GEM_MODEL_GEMMA4_DRAFT_H
#define GEM_MODEL_GEMMA4_DRAFT_H

#include <stdint.h>

#include "model/gemma4.h"
#include "model/gemma4_run.h"

typedef struct gemma4_drafter gemma4_drafter;

/* asst must be an assistant that fits the target (gemma4_pair_check); the
 * target state must outlive the drafter. */
gemma4_drafter *gemma4_drafter_new(const gemma4_model *asst, gemma4_state *target, gem_err *err);

/* The drafter's resident weights alone, to share between the drafters of
 * several targets on one backend (an engine's parallel sessions):
 * gemma4_drafter_on makes a drafter over them (free the drafters first).
 * gemma4_drafter_new is the two in one, the weights its own. */
typedef struct gemma4_draft_weights gemma4_draft_weights;
gemma4_draft_weights *gemma4_draft_weights_new(const gemma4_model *asst, backend *b, gem_err *err);
void gemma4_draft_weights_free(gemma4_draft_weights *w);
gemma4_drafter *gemma4_drafter_on(gemma4_draft_weights *w, gemma4_state *target, gem_err *err);
void gemma4_drafter_free(gemma4_drafter *d);

/* One draft step: the token after `id`, which sits at the target's n_past
 * (evaluated by the target or not). first: h is the target's hidden state
 * (the round's first step); else the previous step's h_next. *next gets
 * the argmax of the drafter's logits (lowest id on ties); p_top, when not
 * NULL, its softmax probability (the backend's argmax_prob, else from the
 * logits read back); logits, when not NULL, all of them (vocabulary
 * floats). */
int gemma4_draft_step(gemma4_drafter *d, int32_t id, int first, int32_t *next, float *p_top, float *logits,
                      gem_err *err);

/* Weight bytes one draft step reads (for the benchmarks' cost model). */
uint64_t gemma4_draft_bytes(const gemma4_drafter *d);

#endif
