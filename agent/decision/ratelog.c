/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fail-mode, never-fits and rejected-cost log lines, at most one per rule
 * per interval per worker (see ratelog.h). The state is a thread-local
 * struct ratelog per kind of line (4 KiB per thread that ever logs that
 * kind), so workers never contend; the main thread never calls this.
 * ratelog_shared_allow() is the one exception: its state is the caller's,
 * shared by all threads under its mutex.
 */
#include <stdio.h>
#include <string.h>

#include "ratelog.h"
#include "log.h"
#include "util.h"

static _Thread_local struct ratelog tl_state;
static _Thread_local struct ratelog tl_never_fits;
static _Thread_local struct ratelog tl_cost_rejected;
static _Thread_local struct ratelog tl_settle_unmatched;
static _Thread_local struct ratelog tl_settle_unconfirmed;
static _Thread_local struct ratelog tl_settle_orphaned;

/* ratelog_allow() on one slot: its last line at <*last_us>, <*count>
 * calls refused since. */
static int
slot_allow(int64_t *last_us, uint64_t *count, int64_t now_us,
           uint64_t *suppressed)
{
	if (*last_us != 0 && now_us - *last_us < RATELOG_INTERVAL_US) {
		(*count)++;
		return 0;
	}
	*suppressed = *count;
	*count = 0;
	/* A clock at exactly 0 would read as "never": nudge it. */
	*last_us = now_us != 0 ? now_us : 1;
	return 1;
}

int
ratelog_allow(struct ratelog *rl, int index, int64_t now_us,
              uint64_t *suppressed)
{
	int i = index < 0 || index >= RATELOG_MAX_RULES ? RATELOG_MAX_RULES - 1
	                                                : index;

	return slot_allow(&rl->last_us[i], &rl->suppressed[i], now_us,
	                  suppressed);
}

/* The slot of <key> in <rl>, taken if new; the last one when full.
 * Under <rl>'s lock. */
static int
shared_slot(struct ratelog_shared *rl, const char *key)
{
	char k[RATELOG_SHARED_KEY_MAX];
	int  i;

	snprintf(k, sizeof(k), "%s", key);
	for (i = 0; i < rl->n; i++)
		if (strcmp(rl->slot[i].key, k) == 0)
			return i;
	if (rl->n == RATELOG_SHARED_KEYS)
		return RATELOG_SHARED_KEYS - 1;
	memcpy(rl->slot[i].key, k, sizeof(k));
	rl->n++;
	return i;
}

int
ratelog_shared_allow(struct ratelog_shared *rl, const char *key,
                     int64_t now_us, uint64_t *suppressed)
{
	int i, allow;

	pthread_mutex_lock(&rl->lock);
	i = shared_slot(rl, key);
	allow = slot_allow(&rl->slot[i].last_us, &rl->slot[i].suppressed,
	                   now_us, suppressed);
	pthread_mutex_unlock(&rl->lock);
	return allow;
}

int
ratelog_addr_allow(struct ratelog_shared *rl, const char *host, int port,
                   int64_t now_us, uint64_t *suppressed)
{
	char key[RATELOG_SHARED_KEY_MAX];

	snprintf(key, sizeof(key), "%s:%d", host, port);
	return ratelog_shared_allow(rl, key, now_us, suppressed);
}

static const char *
mode_name(enum fail_mode m)
{
	switch (m) {
	case FAIL_OPEN:
		return "open";
	case FAIL_CLOSED:
		return "closed";
	case FAIL_LOCAL:
		return "local";
	}
	return "unknown";
}

int
ratelog_fail_mode(const struct rule *rule, int worker, int store_up)
{
	uint64_t suppressed;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(&tl_state, rule->index, util_now_us(), &suppressed))
		return 0;
	log_warn("fail_mode",
	         "rule=%s mode=%s reason=%s worker=%d suppressed=%llu",
	         rule->name, mode_name(rule->fail),
	         store_up ? "redis_timeout_or_error" : "redis_down", worker,
	         (unsigned long long)suppressed);
	return 1;
}

int
ratelog_never_fits(const struct rule *rule, int worker, int64_t cost,
                   int64_t quota, int64_t retry_after_s)
{
	uint64_t suppressed;

	if (log_level < LOG_WARN || !ratelog_allow(&tl_never_fits, rule->index,
	                                           util_now_us(), &suppressed))
		return 0;
	log_warn("cost_never_fits",
	         "rule=%s cost=%lld quota=%lld retry_after=%lld "
	         "worker=%d suppressed=%llu",
	         rule->name, (long long)cost, (long long)quota,
	         (long long)retry_after_s, worker,
	         (unsigned long long)suppressed);
	return 1;
}

int
ratelog_cost_rejected(const struct rule *rule, int worker)
{
	uint64_t suppressed;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(&tl_cost_rejected, rule->index, util_now_us(),
	                   &suppressed))
		return 0;
	log_warn("response_cost_rejected",
	         "rule=%s arg=%s worker=%d "
	         "suppressed=%llu",
	         rule->name, rule->cost_arg ? rule->cost_arg : "", worker,
	         (unsigned long long)suppressed);
	return 1;
}

/* A settle line <msg> for <rule>, through <rl>. */
static int
settle_line(struct ratelog *rl, const char *msg, const struct rule *rule,
            int worker)
{
	uint64_t suppressed;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(rl, rule->index, util_now_us(), &suppressed))
		return 0;
	log_warn(msg, "rule=%s worker=%d suppressed=%llu", rule->name, worker,
	         (unsigned long long)suppressed);
	return 1;
}

int
ratelog_settle_unmatched(const struct rule *rule, int worker)
{
	return settle_line(&tl_settle_unmatched, "settle_unmatched", rule,
	                   worker);
}

int
ratelog_settle_unconfirmed(const struct rule *rule, int worker)
{
	return settle_line(&tl_settle_unconfirmed, "settle_unconfirmed", rule,
	                   worker);
}

int
ratelog_settle_orphaned(const char *message, const char *rules, int worker)
{
	uint64_t suppressed;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(&tl_settle_orphaned, 0, util_now_us(), &suppressed))
		return 0;
	log_warn("settle_orphaned",
	         "message=%s removed_rules=%s worker=%d suppressed=%llu",
	         message, rules, worker, (unsigned long long)suppressed);
	return 1;
}
