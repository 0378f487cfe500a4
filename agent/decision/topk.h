/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topk: who is being denied now. A Space-Saving summary (Metwally et al.,
 * 2005) of the keys each rule denies, per worker, over the last minute,
 * in fixed memory; the admin API publishes and merges them across the
 * pool (toppool.h). Keys never become metric labels.
 *
 * Space-Saving keeps TOPK_K counters. A key already counted is bumped; a
 * new key takes the smallest counter over, starting from its count + 1
 * and remembering that count as its error. So any key denied more than
 * total / TOPK_K times in a slot is in the summary, and a count is at
 * most <err> too high. The minute is TOPK_SLOTS slots of TOPK_SLOT_US,
 * each its own summary, reset when its time comes round again: "the last
 * minute" is the last 50 to 60 s.
 *
 * Bounded: one struct topk (TOPK_BYTES, about 44 kB) per rule that has
 * denied something, per worker, allocated on the rule's first denial in
 * that worker and never again; nothing grows with the number of keys.
 *
 * Threads: topk_note() runs on a worker, under that worker's own lock
 * (uncontended but for the collector, once a second); topk_collect() on
 * any thread.
 */
#ifndef TOPK_H
#define TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "policy.h"

#define TOPK_K           32
#define TOPK_SLOTS       6
#define TOPK_SLOT_US     10000000LL /* 10 s */
#define TOPK_MAX_WORKERS 256

struct topk_entry {
	uint64_t h; /* hash of the key, compared first */
	int64_t  count, err;
	size_t   len;
	char     key[POLICY_KEY_MAX + 1];
};

struct topk_slot {
	int64_t           epoch; /* now / TOPK_SLOT_US when filled */
	int64_t           total; /* every denial of the slot */
	int               n;
	struct topk_entry e[TOPK_K];
};

struct topk {
	struct topk_slot s[TOPK_SLOTS];
};

#define TOPK_BYTES sizeof(struct topk)

/* Counts one denial of <key> at <now_us>. Never allocates. */
void topk_add(struct topk *t, const char *key, size_t len, int64_t now_us);

/* A merged view: keys summed over slots, workers or agents. */
struct topk_item {
	char   *key; /* malloc'ed */
	size_t  len;
	int64_t count, err;
};

struct topk_merge {
	struct topk_item *v;
	int               n, cap;
	int64_t           total; /* denials in all, not only the top */
	/* The smallest counts of the full summaries merged: a key one of
	 * them does not list may still have been denied that often there.
	 * Their items are added less it, and topk_merge_finish() adds the
	 * sum to every key, so a count stays an upper bound. */
	int64_t floor;
	/* After topk_merge_finish(): the most a key <m> does not hold may
	 * have been counted (the floor it added to the others). */
	int64_t bound;
};

/* Adds the slots of <t> still in the minute at <now_us> to <m>. */
void topk_merge_summary(struct topk_merge *m, const struct topk *t,
                        int64_t now_us);
/* Adds one key's count to <m> (copied). */
void topk_merge_add(struct topk_merge *m, const char *key, size_t len,
                    int64_t count, int64_t err);
/* Folds equal keys and sorts by count, most first. */
void topk_merge_finish(struct topk_merge *m);
void topk_merge_free(struct topk_merge *m);

/* ---- the process's summaries, per worker and rule ---------------------- */

/* A denial by worker <worker> of rule metrics slot <slot> (a rule whose
 * slot is not a real one, or a worker id past TOPK_MAX_WORKERS, is not
 * counted). */
void topk_note(int worker, int slot, const char *key, size_t len,
               int64_t now_us);

/* Merges every worker's summary of <slot> into <m> (not finished). */
void topk_collect(int slot, int64_t now_us, struct topk_merge *m);

#endif
