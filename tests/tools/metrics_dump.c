/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_dump: prints a metrics_render() exposition filled with sample
 * values (two workers, every family non-zero, a rule name that needs
 * escaping, a reload) so tests/integration/metrics.sh can feed it to
 * `promtool check metrics`. It runs no server and touches no network.
 */
#include <stdio.h>
#include <stdlib.h>

#include "metrics.h"

int
main(void)
{
	const char            *rules[] = { "ip", "tenant", "odd \"name\"\\x" };
	struct metrics_worker *a, *b;
	size_t                 len;
	char                  *text;

	metrics_init("dump");
	a = metrics_worker_new();
	b = metrics_worker_new();
	metrics_set_rules(rules, 3);
	metrics_policy_loaded();
	metrics_policy_reload(true);
	metrics_policy_reload(false);
	for (int i = 0; i < 3; i++) {
		metrics_decision_slot(a, metrics_rule_slot(rules[i]),
		                      METRICS_ALLOWED);
		metrics_decision_slot(b, metrics_rule_slot(rules[i]),
		                      METRICS_DENIED);
	}
	metrics_decision_slot(a, METRICS_RULE_OTHER, METRICS_DEGRADED);
	metrics_redis_latency(a, 80);
	metrics_redis_latency(b, 1500);
	metrics_redis_latency(b, 3000000);
	metrics_redis_error(a, METRICS_REDIS_TIMEOUT);
	metrics_frame(a, METRICS_FRM_HELLO);
	metrics_frame(b, METRICS_FRM_NOTIFY);
	metrics_frame(b, METRICS_FRM_ACK);
	metrics_spop_error(a, 10);
	metrics_near_cache_hit(b);
	metrics_conn_open(a);
	metrics_local_keys(a, 42);
	metrics_circuit(b, true);
	text = metrics_render_alloc(&len);
	fwrite(text, 1, len, stdout);
	free(text);
	return 0;
}
