/* SPDX-License-Identifier: Apache-2.0 */
/* store: redis URL parsing (the rest is covered against a live Redis). */
#include <criterion/criterion.h>

#include "link.h"
#include "reqq.h"
#include "store.h"

Test(store, url_with_host_port_db)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://10.1.2.3:6380/2", &a), 0);
	cr_assert_str_eq(a.host, "10.1.2.3");
	cr_assert_eq(a.port, 6380);
	cr_assert_eq(a.db, 2);
	cr_assert_str_eq(a.pass, "");
}

Test(store, url_defaults_port_and_db)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://localhost", &a), 0);
	cr_assert_str_eq(a.host, "localhost");
	cr_assert_eq(a.port, 6379);
	cr_assert_eq(a.db, 0);
}

Test(store, url_with_user_and_password)
{
	struct store_addr a;

	cr_assert_eq(
		store_parse_url("redis://agent:s3cret@127.0.0.1:6379/0", &a),
		0);
	cr_assert_str_eq(a.user, "agent");
	cr_assert_str_eq(a.pass, "s3cret");
	cr_assert_eq(store_parse_url("redis://:only@127.0.0.1", &a), 0);
	cr_assert_str_eq(a.user, "");
	cr_assert_str_eq(a.pass, "only");
}

/* RFC 3986: a password holding '@', ':' or '/' is percent-encoded, and a
 * literal '%' is %25; the last '@' before the path ends the userinfo. */
Test(store, url_userinfo_is_percent_decoded)
{
	struct store_addr a;

	cr_assert_eq(
		store_parse_url("redis://ag%65nt:p%40ss%3Aw%2Fd%25@h:7/1", &a),
		0);
	cr_assert_str_eq(a.user, "agent");
	cr_assert_str_eq(a.pass, "p@ss:w/d%");
	cr_assert_str_eq(a.host, "h");
	cr_assert_eq(a.port, 7);
	cr_assert_eq(a.db, 1);
	cr_assert_eq(store_parse_url("redis://:a@b@h", &a), 0);
	cr_assert_str_eq(a.pass, "a@b");
	cr_assert_str_eq(a.host, "h");
}

Test(store, url_rejects_a_bad_percent_escape)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://:50%@h", &a), -1);
	cr_assert_eq(store_parse_url("redis://:50%4@h", &a), -1);
	cr_assert_eq(store_parse_url("redis://:x%zz@h", &a), -1);
	cr_assert_eq(store_parse_url("redis://:x%00y@h", &a), -1);
}

Test(store, url_unix_socket)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("unix:/run/redis.sock", &a), 0);
	cr_assert_str_eq(a.path, "/run/redis.sock");
}

Test(store, url_rejects_garbage)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("http://x", &a), -1);
	cr_assert_eq(store_parse_url("redis://", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:0", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:99999", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:12x", &a), -1);
	cr_assert_eq(store_parse_url("redis://h/abc", &a), -1);
	cr_assert_eq(store_parse_url("unix:", &a), -1);
}

/* Only an error saying Redis cannot serve feeds the circuit breaker; an
 * error about one key or one call leaves it alone. */
Test(reqq, outage_errors_are_the_ones_saying_redis_cannot_serve)
{
	cr_assert(link_error_is_outage(
		"LOADING Redis is loading the dataset in memory"));
	cr_assert(link_error_is_outage("BUSY Redis is busy running a script."));
	cr_assert(link_error_is_outage(
		"READONLY You can't write against a read only replica."));
	cr_assert(link_error_is_outage(
		"OOM command not allowed when used memory > 'maxmemory'."));
	cr_assert(link_error_is_outage("NOAUTH Authentication required."));
	cr_assert(link_error_is_outage("CLUSTERDOWN The cluster is down"));
	cr_assert(link_error_is_outage("MASTERDOWN"));
	cr_assert_not(link_error_is_outage(
		"WRONGTYPE Operation against a key holding the wrong kind of value"));
	cr_assert_not(link_error_is_outage("ERR Error running script"));
	cr_assert_not(link_error_is_outage(
		"TRYAGAIN Multiple keys request during rehashing of slot"));
	cr_assert_not(link_error_is_outage("CLUSTERDOWN Hash slot not served"));
	cr_assert(link_error_is_outage(
		"CLUSTERDOWN The cluster is down and only accepts read commands"));
	cr_assert_not(link_error_is_outage(
		"BUSYKEY Target key name already exists."));
	cr_assert_not(link_error_is_outage("OOMX not a code"));
	cr_assert_not(link_error_is_outage(""));
}

/* A request given up on (its deadline passed while it waited for a
 * connect) leaves the queue from wherever it is, so that its memory may
 * be queued again: it used to stay linked, and queueing it again closed
 * the list into a cycle that reqq_fail_all() never left. */
Test(reqq, a_request_given_up_on_leaves_the_queue_and_can_be_queued_again)
{
	struct reqq      q = { 0 };
	struct store_req a = { 0 }, b = { 0 }, c = { 0 };

	reqq_push(&q, &a);
	reqq_push(&q, &b);
	reqq_push(&q, &c);
	reqq_remove(&q, &b); /* from the middle */
	cr_assert_eq(q.queued, 2);
	reqq_remove(&q, &b); /* not queued: nothing */
	cr_assert_eq(q.queued, 2);
	reqq_push(&q, &b); /* reused at once */
	cr_assert_eq(reqq_pop(&q), &a);
	cr_assert_eq(reqq_pop(&q), &c);
	cr_assert_eq(reqq_pop(&q), &b);
	cr_assert_null(reqq_pop(&q));
	cr_assert_eq(q.queued, 0);
	reqq_push(&q, &a);
	reqq_remove(&q, &a); /* the only one: head and tail */
	cr_assert_null(q.head);
	cr_assert_null(q.tail);
}

/* BREAKER_FAILS failures in a row at <now>. */
static void
trip(struct breaker *b, double now)
{
	for (int i = 0; i < BREAKER_FAILS; i++)
		breaker_fail(b, now);
}

Test(breaker, admits_everything_while_closed)
{
	struct breaker b = { 0 };

	for (int i = 0; i < 100; i++)
		cr_assert(breaker_admit(&b, 10.0));
	breaker_fail(&b, 10.0);
	cr_assert(breaker_admit(&b, 10.0), "one failure does not open it");
}

Test(breaker, refuses_everything_during_the_cooldown)
{
	struct breaker b = { 0 };

	trip(&b, 10.0);
	cr_assert(breaker_is_open(&b, 10.0));
	cr_assert_not(breaker_admit(&b, 10.0));
	cr_assert_not(breaker_admit(&b, 10.0 + BREAKER_COOLDOWN - 0.01));
}

Test(breaker, half_open_admits_one_probe_until_its_outcome)
{
	struct breaker b = { 0 };
	double         t = 10.0 + BREAKER_COOLDOWN;

	trip(&b, 10.0);
	cr_assert(breaker_admit(&b, t), "the probe");
	cr_assert_not(breaker_admit(&b, t), "a second request while it is out");
	cr_assert_not(breaker_admit(&b, t + 0.5));
	breaker_fail(&b, t + 0.5); /* the probe failed: open again */
	cr_assert_not(breaker_admit(&b, t + 0.5));
	cr_assert(breaker_admit(&b, t + 0.5 + BREAKER_COOLDOWN),
	          "the next probe");
	cr_assert(breaker_ok(&b), "a good probe closes it");
	cr_assert(breaker_admit(&b, t + 2) && breaker_admit(&b, t + 2));
}

Test(breaker, a_probe_that_never_answers_is_replaced)
{
	struct breaker b = { 0 };
	double         t = 10.0 + BREAKER_COOLDOWN;

	trip(&b, 10.0);
	cr_assert(breaker_admit(&b, t));
	cr_assert_not(breaker_admit(&b, t + BREAKER_PROBE_S - 0.01));
	cr_assert(breaker_admit(&b, t + BREAKER_PROBE_S), "lost: a new probe");
}

/* Only a call that gives leases back goes through an open breaker: one
 * charging check in it, and it waits like any other. */
Test(reqq, releases_only_is_a_call_of_releases_alone)
{
	struct check     c[2] = { { .op = LIM_OP_RELEASE },
		                  { .op = LIM_OP_RELEASE } };
	int              idx[2] = { 0, 1 };
	struct store_req sr = { .checks = c, .index = idx, .n = 2 };

	cr_assert(reqq_releases_only(&sr));
	c[1].op = LIM_OP_CHECK;
	cr_assert_not(reqq_releases_only(&sr));
	sr.n = 1;
	cr_assert(reqq_releases_only(&sr));
	sr.n = 0;
	cr_assert_not(reqq_releases_only(&sr), "nothing to send");
}

/* A settle at 0 (a reserving rule's FORCE with the request id, cost 0:
 * the agent's own for a refused request) only gives units back, as a
 * release does: in the call of that request's lease releases it must not
 * hold them behind an open breaker. A settle that may charge still
 * waits. */
Test(reqq, a_settle_at_0_gives_back_like_a_release)
{
	struct check     c[2] = { { .op = LIM_OP_RELEASE },
		                  { .op = LIM_OP_FORCE, .cost = 0,
		                    .memberlen = 2 } };
	int              idx[2] = { 0, 1 };
	struct store_req sr = { .checks = c, .index = idx, .n = 2 };

	c[1].lim.reserve_lease_us = 600 * LIM_USEC_PER_SEC;
	cr_assert(reqq_releases_only(&sr));
	c[1].cost = 50;
	cr_assert_not(reqq_releases_only(&sr), "a settle that may charge");
	c[1].cost = 0;
	c[1].lim.reserve_lease_us = 0;
	cr_assert_not(reqq_releases_only(&sr), "not a reserving rule's: no settle");
}
