/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: per-worker counters summed at scrape, the exposition text
 * (HELP/TYPE, exact values, histogram shape, label escaping, rule names
 * across reloads), and httpd: /metrics and /healthz over a real loopback
 * socket with the status codes it promises (404, 405, 400, timeouts, the
 * connection bound). Criterion runs each test in its own process, so the
 * global registry starts empty in every test.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <ev.h>

#include "httpd.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------ */

static char *
render(void)
{
	size_t len;
	char  *s = metrics_render_alloc(&len);

	cr_assert_eq(strlen(s), len);
	return s;
}

/* True if <text> has <line> as a whole line. */
static int
has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') &&
		    (p[n] == '\n' || p[n] == '\0'))
			return 1;
	return 0;
}

#define assert_line(text, line)                                                \
	cr_assert(has_line((text), (line)), "missing line: %s\n---\n%s",       \
	          (line), (text))

/* A small format check: every line is a HELP, a TYPE, or a sample of the
 * family last TYPEd (name, optional name_bucket/_sum/_count for
 * histograms), with quoted labels and a numeric value; every family has
 * HELP before TYPE. */
static void
check_format(const char *text)
{
	regex_t     sample;
	char        family[128] = "", type[16] = "", name[128];
	const char *p = text, *nl;
	int         rc;

	rc = regcomp(
		&sample,
		"^([a-zA-Z_:][a-zA-Z0-9_:]*)"
		"(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\]|\\\\.)*\",?)*\\})? "
		"(-?[0-9]+(\\.[0-9]+)?(e-?[0-9]+)?|\\+Inf)$",
		REG_EXTENDED);
	cr_assert_eq(rc, 0);
	for (; *p != '\0'; p = nl + 1) {
		char       line[1024];
		size_t     len;
		regmatch_t m[2];

		nl = strchr(p, '\n');
		cr_assert_not_null(nl, "text must end with a newline");
		len = (size_t)(nl - p);
		cr_assert_lt(len, sizeof(line));
		memcpy(line, p, len);
		line[len] = '\0';
		if (sscanf(line, "# HELP %127s", name) == 1) {
			snprintf(family, sizeof(family), "%s", name);
			type[0] = '\0';
			continue;
		}
		if (sscanf(line, "# TYPE %127s %15s", name, type) == 2) {
			cr_assert_str_eq(name, family, "TYPE without HELP: %s",
			                 line);
			continue;
		}
		cr_assert_eq(regexec(&sample, line, 2, m, 0), 0, "bad line: %s",
		             line);
		len = (size_t)(m[1].rm_eo - m[1].rm_so);
		snprintf(name, sizeof(name), "%.*s", (int)len, line);
		cr_assert_neq(type[0], '\0', "sample before TYPE: %s", line);
		if (strcmp(type, "histogram") == 0) {
			size_t f = strlen(family);

			cr_assert(strncmp(name, family, f) == 0 &&
			                  (strcmp(name + f, "_bucket") == 0 ||
			                   strcmp(name + f, "_sum") == 0 ||
			                   strcmp(name + f, "_count") == 0),
			          "stray sample %s in %s", name, family);
		} else {
			cr_assert_str_eq(name, family,
			                 "sample of %s after TYPE %s", name,
			                 family);
		}
	}
	regfree(&sample);
}

/* ---- counters ----------------------------------------------------------- */

Test(metrics, counters_sum_across_workers)
{
	struct metrics_worker *w[3];
	char                  *s;

	for (int i = 0; i < 3; i++)
		w[i] = metrics_worker_new();
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k <= i; k++) {
			metrics_frame(w[i], METRICS_FRM_NOTIFY);
			metrics_frame(w[i], METRICS_FRM_ACK);
			metrics_near_cache_hit(w[i]);
			metrics_notify_overflow(w[i]);
			metrics_inflight_full(w[i]);
			metrics_self_release(w[i], 2);
			metrics_release_lost(w[i]);
			metrics_redis_error(w[i], METRICS_REDIS_TIMEOUT);
		}
	}
	metrics_frame(w[2], METRICS_FRM_HEALTHCHECK);
	metrics_redis_error(w[0], METRICS_REDIS_NOSCRIPT);
	s = render();
	assert_line(s, "spoa_rl_spop_frames_total{type=\"notify\"} 6");
	assert_line(s, "spoa_rl_spop_frames_total{type=\"ack\"} 6");
	assert_line(s, "spoa_rl_spop_frames_total{type=\"hello\"} 0");
	assert_line(s, "spoa_rl_spop_frames_total{type=\"healthcheck\"} 1");
	assert_line(s, "spoa_rl_spop_frames_total{type=\"disconnect\"} 0");
	assert_line(s, "spoa_rl_near_cache_hits_total 6");
	assert_line(s, "spoa_rl_notify_too_many_checks_total 6");
	assert_line(s, "spoa_rl_inflight_full_total 6");
	assert_line(s, "spoa_rl_lease_self_releases_total 12");
	assert_line(s, "spoa_rl_lease_releases_lost_total 6");
	assert_line(s, "spoa_rl_redis_errors_total{kind=\"timeout\"} 6");
	assert_line(s, "spoa_rl_redis_errors_total{kind=\"noscript\"} 1");
	assert_line(s, "spoa_rl_redis_errors_total{kind=\"io\"} 0");
	assert_line(s, "spoa_rl_redis_errors_total{kind=\"reply\"} 0");
	assert_line(s, "spoa_rl_redis_errors_total{kind=\"refused\"} 0");
	check_format(s);
	free(s);
}

Test(metrics, help_and_type_lines)
{
	static const char *const fam[][2] = {
		{ "spoa_rl_build_info", "gauge" },
		{ "process_start_time_seconds", "gauge" },
		{ "spoa_rl_decisions_total", "counter" },
		{ "spoa_rl_redis_request_duration_seconds", "histogram" },
		{ "spoa_rl_redis_errors_total", "counter" },
		{ "spoa_rl_redis_circuit_open", "gauge" },
		{ "spoa_rl_near_cache_hits_total", "counter" },
		{ "spoa_rl_local_keys", "gauge" },
		{ "spoa_rl_spop_connections", "gauge" },
		{ "spoa_rl_spop_connections_total", "counter" },
		{ "spoa_rl_spop_frames_total", "counter" },
		{ "spoa_rl_spop_errors_total", "counter" },
		{ "spoa_rl_notify_too_many_checks_total", "counter" },
		{ "spoa_rl_inflight_full_total", "counter" },
		{ "spoa_rl_lease_self_releases_total", "counter" },
		{ "spoa_rl_lease_releases_lost_total", "counter" },
		{ "spoa_rl_reserve_self_settles_total", "counter" },
		{ "spoa_rl_reserve_self_settles_lost_total", "counter" },
		{ "spoa_rl_policy_reloads_total", "counter" },
		{ "spoa_rl_policy_last_reload_success_timestamp_seconds",
		  "gauge" },
	};
	char want[256], *s;

	metrics_init("1.2.3");
	metrics_worker_new();
	s = render();
	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
		snprintf(want, sizeof(want), "# HELP %s ", fam[i][0]);
		cr_assert(strstr(s, want) != NULL, "no HELP for %s", fam[i][0]);
		snprintf(want, sizeof(want), "# TYPE %s %s", fam[i][0],
		         fam[i][1]);
		assert_line(s, want);
	}
	assert_line(s, "spoa_rl_build_info{version=\"1.2.3\"} 1");
	check_format(s);
	free(s);
}

Test(metrics, empty_registry_renders)
{
	char *s = render();

	/* No worker yet: every family is there with zeros. */
	assert_line(s, "spoa_rl_build_info{version=\"unknown\"} 1");
	assert_line(s, "spoa_rl_spop_connections 0");
	assert_line(s, "spoa_rl_redis_request_duration_seconds_count 0");
	assert_line(s,
	            "spoa_rl_policy_last_reload_success_timestamp_seconds 0");
	cr_assert_null(strstr(s, "process_start_time_seconds"));
	check_format(s);
	free(s);
}

Test(metrics, histogram_cumulative_with_inf_sum_count)
{
	struct metrics_worker *a = metrics_worker_new();
	struct metrics_worker *b = metrics_worker_new();
	const char            *h = "spoa_rl_redis_request_duration_seconds";
	char                   want[160], *s;

	metrics_redis_latency(a, 40);      /* <= 50us */
	metrics_redis_latency(a, 100);     /* == 100us: le is inclusive */
	metrics_redis_latency(b, 101);     /* <= 250us */
	metrics_redis_latency(b, 3000);    /* <= 5ms */
	metrics_redis_latency(a, 2000000); /* past 1s: +Inf only */
	metrics_redis_latency(b, -5);      /* clamped to 0 */
	s = render();
	static const struct {
		const char *le;
		int         n;
	} want_b[] = {
		{ "0.00005", 2 }, { "0.0001", 3 }, { "0.00025", 4 },
		{ "0.0005", 4 },  { "0.001", 4 },  { "0.002", 4 },
		{ "0.005", 5 },   { "0.01", 5 },   { "0.025", 5 },
		{ "0.05", 5 },    { "0.1", 5 },    { "0.25", 5 },
		{ "0.5", 5 },     { "1", 5 },      { "+Inf", 6 },
	};
	for (size_t i = 0; i < sizeof(want_b) / sizeof(want_b[0]); i++) {
		snprintf(want, sizeof(want), "%s_bucket{le=\"%s\"} %d", h,
		         want_b[i].le, want_b[i].n);
		assert_line(s, want);
	}
	snprintf(want, sizeof(want), "%s_sum 2.003241", h);
	assert_line(s, want);
	snprintf(want, sizeof(want), "%s_count 6", h);
	assert_line(s, want);
	/* +Inf is the last bucket, then _sum, then _count. */
	cr_assert_lt(strstr(s, "le=\"1\"}"), strstr(s, "le=\"+Inf\"}"));
	cr_assert_lt(strstr(s, "le=\"+Inf\"}"), strstr(s, "_sum "));
	cr_assert_lt(strstr(s, "_sum "), strstr(s, "_count "));
	check_format(s);
	free(s);
}

Test(metrics, label_values_escaped)
{
	const char            *names[] = { "a\"b\\c\nd", "plain" };
	struct metrics_worker *w = metrics_worker_new();
	char                  *s;

	metrics_set_rules(names, 2);
	metrics_decision_slot(w, metrics_rule_slot(names[0]), METRICS_DENIED);
	s = render();
	assert_line(s, "spoa_rl_decisions_total{rule=\"a\\\"b\\\\c\\nd\","
	               "outcome=\"denied\"} 1");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"plain\",outcome=\"allowed\"} 0");
	check_format(s);
	free(s);
}

Test(metrics, rule_names_after_set_rules)
{
	const char *v1[] = { "ip", "tenant" };
	const char *v2[] = { "tenant", "login" }; /* reordered + new */
	struct metrics_worker *w = metrics_worker_new();
	char                  *s;

	int ip, tenant;

	metrics_set_rules(v1, 2);
	ip = metrics_rule_slot("ip");
	tenant = metrics_rule_slot("tenant");
	metrics_decision_slot(w, ip, METRICS_ALLOWED);
	metrics_decision_slot(w, ip, METRICS_ALLOWED);
	metrics_decision_slot(w, tenant, METRICS_DENIED);
	metrics_decision_slot(w, tenant, METRICS_SHADOW_DENIED);
	metrics_decision_slot(w, tenant, METRICS_DEGRADED);
	s = render();
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"ip\",outcome=\"allowed\"} 2");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"tenant\",outcome=\"denied\"} 1");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"tenant\",outcome=\"shadow_denied\"} 1");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"tenant\",outcome=\"degraded\"} 1");
	cr_assert_null(strstr(s, "login"));
	free(s);

	/* Reload: index 0 is now "tenant", "login" is new, "ip" is gone; a
	 * rule keeps its slot, and "login" is exported before it counts. */
	metrics_set_rules(v2, 2);
	cr_assert_eq(metrics_rule_slot("tenant"), tenant);
	s = render();
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"login\",outcome=\"allowed\"} 0");
	free(s);
	metrics_decision_slot(w, tenant, METRICS_DENIED);
	metrics_decision_slot(w, metrics_rule_slot("login"), METRICS_ALLOWED);
	s = render();
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"tenant\",outcome=\"denied\"} 2");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"login\",outcome=\"allowed\"} 1");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"ip\",outcome=\"allowed\"} 2");
	cr_assert_null(strstr(s, "_other"));
	cr_assert_eq(metrics_rule_slot("tenant"), 1);
	check_format(s);
	free(s);
}

Test(metrics, out_of_range_slots_count_as_other)
{
	const char            *v[] = { "only" };
	struct metrics_worker *w = metrics_worker_new();
	char                  *s;

	metrics_set_rules(v, 1);
	metrics_decision_slot(w, METRICS_RULE_OTHER, METRICS_ALLOWED);
	metrics_decision_slot(w, -1, METRICS_DENIED);
	metrics_decision_slot(w, METRICS_RULE_OTHER + 1, METRICS_DENIED);
	metrics_decision_slot(w, 100000, METRICS_DENIED);
	metrics_decision_slot(w, metrics_rule_slot("only"), METRICS_DEGRADED);
	s = render();
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"_other\",outcome=\"allowed\"} 1");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"_other\",outcome=\"denied\"} 3");
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"only\",outcome=\"degraded\"} 1");
	check_format(s);
	free(s);
}

/* The number of lines of <text> that are exactly <line>. */
static int
count_lines(const char *text, const char *line)
{
	size_t n = strlen(line);
	int    k = 0;

	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') &&
		    (p[n] == '\n' || p[n] == '\0'))
			k++;
	return k;
}

/* A policy may name a rule "_other" (a valid name): it must not get a
 * series of its own beside the overflow's, which has that same label
 * once more than METRICS_MAX_RULES names are known. Two samples of one
 * series in a scrape are invalid exposition (Prometheus drops one as a
 * duplicate), so the rule counts in the overflow series, and is listed
 * at 0 before it counts like any rule. */
Test(metrics, rule_named_other_is_one_series_with_the_overflow)
{
	struct metrics_worker *w = metrics_worker_new();
	const char            *v[] = { "_other" };
	char                   name[32];
	char                  *s;
	int                    slot;

	metrics_set_rules(v, 1);
	s = render();
	assert_line(
		s,
		"spoa_rl_decisions_total{rule=\"_other\",outcome=\"allowed\"} 0");
	free(s);
	slot = metrics_rule_slot("_other");
	/* one name more than the table holds: r256 overflows */
	for (int i = 0; i <= METRICS_MAX_RULES; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		metrics_rule_slot(name);
	}
	metrics_decision_slot(w, slot, METRICS_ALLOWED);
	metrics_decision_slot(w, metrics_rule_slot("r256"), METRICS_ALLOWED);
	metrics_blocked(w, slot);
	metrics_blocked(w, metrics_rule_slot("r256"));
	s = render();
	cr_assert_eq(count_lines(s, "spoa_rl_decisions_total{rule=\"_other\","
	                            "outcome=\"allowed\"} 2"),
	             1, "one _other series, counting both:\n%s", s);
	cr_assert_eq(count_lines(s, "spoa_rl_decisions_total{rule=\"_other\","
	                            "outcome=\"denied\"} 0"),
	             1, "one _other series:\n%s", s);
	cr_assert_eq(count_lines(s, "spoa_rl_blocked_total{rule=\"_other\"} 2"),
	             1, "one _other series, counting both:\n%s", s);
	check_format(s);
	free(s);
}

Test(metrics, rule_names_bounded)
{
	char name[32];

	for (int i = 0; i < METRICS_MAX_RULES; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		cr_assert_eq(metrics_rule_slot(name), i);
	}
	cr_assert_eq(metrics_rule_slot("one-too-many"), METRICS_RULE_OTHER);
	cr_assert_eq(metrics_rule_slot("r7"), 7);
}

Test(metrics, connections_gauge_and_total)
{
	struct metrics_worker *a = metrics_worker_new();
	struct metrics_worker *b = metrics_worker_new();
	char                  *s;

	metrics_conn_open(a);
	metrics_conn_open(a);
	metrics_conn_open(b);
	metrics_conn_close(a);
	s = render();
	assert_line(s, "spoa_rl_spop_connections 2");
	assert_line(s, "spoa_rl_spop_connections_total 3");
	free(s);
}

Test(metrics, spop_errors_by_status)
{
	struct metrics_worker *w = metrics_worker_new();
	char                  *s;

	metrics_spop_error(w, 4);
	metrics_spop_error(w, 4);
	metrics_spop_error(w, 10);
	metrics_spop_error(w, 99);
	metrics_spop_error(w, 57); /* unknown: counted as 99 */
	metrics_spop_error(w, 0);  /* normal: not an error */
	s = render();
	assert_line(s, "spoa_rl_spop_errors_total{status=\"4\"} 2");
	assert_line(s, "spoa_rl_spop_errors_total{status=\"10\"} 1");
	assert_line(s, "spoa_rl_spop_errors_total{status=\"99\"} 2");
	assert_line(s, "spoa_rl_spop_errors_total{status=\"1\"} 0");
	assert_line(s, "spoa_rl_spop_errors_total{status=\"13\"} 0");
	cr_assert_null(strstr(s, "status=\"0\""));
	free(s);
}

Test(metrics, gauges)
{
	struct metrics_worker *a = metrics_worker_new();
	struct metrics_worker *b = metrics_worker_new();
	char                  *s;

	metrics_local_keys(a, 10);
	metrics_local_keys(b, 5);
	metrics_circuit(b, true);
	s = render();
	assert_line(s, "spoa_rl_local_keys 15");
	assert_line(s, "spoa_rl_redis_circuit_open 1");
	free(s);
	metrics_circuit(b, false);
	metrics_local_keys(a, 1);
	s = render();
	assert_line(s, "spoa_rl_local_keys 6");
	assert_line(s, "spoa_rl_redis_circuit_open 0");
	free(s);
}

Test(metrics, policy_reloads)
{
	char  *s, *p;
	double ts;

	metrics_policy_loaded();
	metrics_policy_reload(true);
	metrics_policy_reload(false);
	metrics_policy_reload(false);
	s = render();
	assert_line(s, "spoa_rl_policy_reloads_total{result=\"ok\"} 1");
	assert_line(s, "spoa_rl_policy_reloads_total{result=\"error\"} 2");
	p = strstr(s,
	           "\nspoa_rl_policy_last_reload_success_timestamp_seconds ");
	cr_assert_not_null(p);
	ts = strtod(strchr(p + 1, ' '), NULL);
	cr_assert(ts > (double)time(NULL) - 60 && ts < (double)time(NULL) + 60,
	          "timestamp %f", ts);
	free(s);
}

Test(metrics, render_like_snprintf)
{
	struct metrics_worker *w = metrics_worker_new();
	char                   small[32], *full;
	size_t                 n, len;

	metrics_frame(w, METRICS_FRM_HELLO);
	full = metrics_render_alloc(&len);
	n = metrics_render(NULL, 0);
	cr_assert_eq(n, len);
	n = metrics_render(small, sizeof(small));
	cr_assert_eq(n, len);
	cr_assert_eq(strlen(small), sizeof(small) - 1);
	cr_assert_eq(strncmp(small, full, sizeof(small) - 1), 0);
	free(full);
}

/* Writers run while the scrape reads: no count is lost, and the values
 * only go up between scrapes. */
#define RACE_N 200000

static void *
race_writer(void *arg)
{
	struct metrics_worker *w = metrics_worker_new();

	(void)arg;
	for (int i = 0; i < RACE_N; i++) {
		metrics_frame(w, METRICS_FRM_NOTIFY);
		metrics_conn_open(w);
		metrics_conn_close(w);
	}
	return NULL;
}

static unsigned long long
value_of(const char *text, const char *prefix)
{
	const char *p = strstr(text, prefix);

	cr_assert_not_null(p, "no %s", prefix);
	return strtoull(p + strlen(prefix), NULL, 10);
}

Test(metrics, concurrent_writers_and_scrape)
{
	pthread_t          t[4];
	unsigned long long last = 0, v;
	char              *s;

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, race_writer, NULL);
	for (int i = 0; i < 50; i++) {
		s = render();
		v = value_of(s, "spoa_rl_spop_frames_total{type=\"notify\"} ");
		cr_assert_geq(v, last);
		last = v;
		/* closed is read first: never more closes than opens, so the
		 * gauge never wraps below 0. (It may count the opens made
		 * between the two reads: the writers do not stop.) */
		cr_assert_leq(value_of(s, "\nspoa_rl_spop_connections "),
		              value_of(s, "\nspoa_rl_spop_connections_total "));
		free(s);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	s = render();
	cr_assert_eq(value_of(s, "spoa_rl_spop_frames_total{type=\"notify\"} "),
	             4ULL * RACE_N);
	assert_line(s, "spoa_rl_spop_connections 0");
	free(s);
}

/* ---- httpd -------------------------------------------------------------- */

struct srv {
	struct ev_loop *loop;
	struct httpd   *h;
	ev_async        stop;
	pthread_t       thread;
	_Atomic int     healthy;
	int             port;
};

static int
srv_healthy(void *arg)
{
	struct srv *s = arg;

	return s->healthy;
}

static void
srv_stop_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct srv *s = container_of(w, struct srv, stop);

	httpd_free(s->h);
	ev_break(loop, EVBREAK_ALL);
}

static void *
srv_run(void *arg)
{
	struct srv *s = arg;

	ev_run(s->loop, 0);
	return NULL;
}

static struct srv *
srv_start(double timeout)
{
	struct srv *s = calloc(1, sizeof(*s));
	char       *err = NULL;

	log_level = LOG_ERROR;
	s->healthy = 1;
	s->loop = ev_loop_new(EVFLAG_AUTO);
	s->h = httpd_new(s->loop, "127.0.0.1:0", srv_healthy, s, &err);
	cr_assert_not_null(s->h, "httpd_new: %s", err);
	if (timeout > 0)
		httpd_set_timeout(s->h, timeout);
	s->port = httpd_port(s->h);
	cr_assert_gt(s->port, 0);
	ev_async_init(&s->stop, srv_stop_cb);
	ev_async_start(s->loop, &s->stop);
	pthread_create(&s->thread, NULL, srv_run, s);
	return s;
}

static void
srv_stop(struct srv *s)
{
	ev_async_send(s->loop, &s->stop);
	pthread_join(s->thread, NULL);
	ev_loop_destroy(s->loop);
	free(s);
}

static int
dial(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct timeval     tv = { .tv_sec = 5 };
	int                fd = socket(AF_INET, SOCK_STREAM, 0);

	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_neq(fd, -1);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0,
	             "connect: %s", strerror(errno));
	return fd;
}

static void
send_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		cr_assert_gt(n, 0, "send: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

/* Reads until EOF into a new string. */
static char *
read_all(int fd)
{
	size_t  cap = 65536, len = 0;
	char   *buf = malloc(cap);
	ssize_t n;

	for (;;) {
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		n = recv(fd, buf + len, cap - len - 1, 0);
		cr_assert_geq(n, 0, "recv: %s", strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	return buf;
}

static char *
request(int port, const char *req, size_t len)
{
	int fd = dial(port);

	send_all(fd, req, len);
	return read_all(fd);
}

#define REQ(port, lit) request((port), (lit), sizeof(lit) - 1)

static const char *
body_of(const char *resp)
{
	const char *p = strstr(resp, "\r\n\r\n");

	cr_assert_not_null(p);
	return p + 4;
}

Test(httpd, get_metrics)
{
	struct srv *s;
	char       *r;
	const char *cl;

	metrics_init("9.9.9");
	metrics_frame(metrics_worker_new(), METRICS_FRM_HELLO);
	s = srv_start(0);
	r = REQ(s->port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
	                 "Accept: text/plain\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	cr_assert_not_null(strstr(r, "\r\nContent-Type: text/plain; "
	                             "version=0.0.4; charset=utf-8\r\n"));
	cr_assert_not_null(strstr(r, "\r\nConnection: close\r\n"));
	cl = strstr(r, "\r\nContent-Length: ");
	cr_assert_not_null(cl);
	cr_assert_eq(strtoul(cl + 18, NULL, 10), strlen(body_of(r)));
	assert_line(body_of(r), "spoa_rl_build_info{version=\"9.9.9\"} 1");
	assert_line(body_of(r), "spoa_rl_spop_frames_total{type=\"hello\"} 1");
	check_format(body_of(r));
	free(r);
	/* A query string and HTTP/1.0 are fine. */
	r = REQ(s->port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 ", 13), 0, "%s", r);
	free(r);
	srv_stop(s);
}

Test(httpd, healthz_follows_callback)
{
	struct srv *s = srv_start(0);
	char       *r;

	r = REQ(s->port, "GET /healthz HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	cr_assert_str_eq(body_of(r), "ok\n");
	free(r);
	s->healthy = 0;
	r = REQ(s->port, "GET /healthz HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 503 Service Unavailable\r\n", 34), 0,
	             "%s", r);
	free(r);
	srv_stop(s);
}

Test(httpd, head_has_no_body)
{
	struct srv *s = srv_start(0);
	char       *r = REQ(s->port, "HEAD /metrics HTTP/1.1\r\n\r\n");

	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	cr_assert_str_eq(body_of(r), "");
	cr_assert_gt(strtoul(strstr(r, "Content-Length: ") + 16, NULL, 10),
	             100);
	free(r);
	srv_stop(s);
}

Test(httpd, unknown_path_404)
{
	struct srv *s = srv_start(0);
	char       *r;

	r = REQ(s->port, "GET / HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 404 Not Found\r\n", 24), 0, "%s", r);
	free(r);
	r = REQ(s->port, "GET /metricsx HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 404 ", 13), 0, "%s", r);
	free(r);
	r = REQ(s->port, "POST /nothing HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 404 ", 13), 0, "%s", r);
	free(r);
	srv_stop(s);
}

Test(httpd, other_methods_405)
{
	struct srv *s = srv_start(0);
	char       *r;

	r = REQ(s->port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 405 Method Not Allowed\r\n", 33), 0,
	             "%s", r);
	cr_assert_not_null(strstr(r, "\r\nAllow: GET, HEAD\r\n"));
	free(r);
	r = REQ(s->port, "DELETE /healthz HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 405 ", 13), 0, "%s", r);
	free(r);
	srv_stop(s);
}

Test(httpd, garbage_400)
{
	static const char *const bad[] = {
		"hello\r\n\r\n",
		"GET /metrics\r\n\r\n",
		"GET /metrics HTTP/2.0\r\n\r\n",
		"get /metrics HTTP/1.1\r\n\r\n",
		"GET metrics HTTP/1.1\r\n\r\n",
		"GET  /metrics HTTP/1.1\r\n\r\n",
		"GET /met\x01rics HTTP/1.1\r\n\r\n",
		"\r\n\r\n",
	};
	struct srv *s = srv_start(0);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *r = request(s->port, bad[i], strlen(bad[i]));

		cr_assert_eq(strncmp(r, "HTTP/1.1 400 Bad Request\r\n", 26), 0,
		             "case %zu: %s", i, r);
		free(r);
	}
	srv_stop(s);
}

Test(httpd, oversized_head_400)
{
	struct srv *s = srv_start(0);
	char       *req = malloc(HTTPD_MAX_HEAD), *r;
	int         n;

	/* Headers that never end, exactly filling the buffer. */
	n = snprintf(req, HTTPD_MAX_HEAD, "GET /metrics HTTP/1.1\r\nX-Pad: ");
	memset(req + n, 'a', HTTPD_MAX_HEAD - (size_t)n);
	r = request(s->port, req, HTTPD_MAX_HEAD);
	cr_assert_eq(strncmp(r, "HTTP/1.1 400 ", 13), 0, "%s", r);
	free(r);
	/* A request line that never ends. */
	memcpy(req, "GET /", 5);
	memset(req + 5, 'a', HTTPD_MAX_HEAD - 5);
	r = request(s->port, req, HTTPD_MAX_HEAD);
	cr_assert_eq(strncmp(r, "HTTP/1.1 400 ", 13), 0, "%s", r);
	free(r);
	free(req);
	srv_stop(s);
}

Test(httpd, request_in_pieces)
{
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
	struct srv       *s = srv_start(0);
	struct timespec   ts = { 0, 2000000 };
	int               fd = dial(s->port);
	char             *r;

	for (size_t i = 0; i < sizeof(req) - 1; i++) {
		send_all(fd, req + i, 1);
		nanosleep(&ts, NULL);
	}
	r = read_all(fd);
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	free(r);
	srv_stop(s);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(httpd, slow_client_times_out)
{
	struct srv *s = srv_start(0.2);
	double      t0 = now_s();
	int         fd = dial(s->port);
	char       *r;

	send_all(fd, "GET /metr", 9); /* and then nothing */
	r = read_all(fd);
	cr_assert_str_eq(r, "");
	cr_assert_lt(now_s() - t0, 2.0);
	cr_assert_geq(now_s() - t0, 0.15);
	free(r);
	srv_stop(s);
}

/* 1 if the server closed <fd> (EOF or reset), 0 if it is still open. */
static int
closed_by_server(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char          b[16];

	if (poll(&p, 1, 1000) <= 0)
		return 0;
	return read(fd, b, sizeof(b)) <= 0;
}

/* A table full of connections that send nothing (a slowloris) does not
 * keep a request out: it takes the slot of the oldest idle one. (Before,
 * it waited in the backlog until the idle ones timed out.) */
Test(httpd, full_table_gives_the_oldest_idle_slot_to_a_new_connection)
{
	struct srv *s = srv_start(5.0);
	int         idle[HTTPD_MAX_CONNS];
	char       *r;

	for (int i = 0; i < HTTPD_MAX_CONNS; i++)
		idle[i] = dial(s->port);
	r = REQ(s->port, "GET /healthz HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	free(r);
	cr_assert(closed_by_server(idle[0]),
	          "the oldest idle connection was closed");
	for (int i = 1; i < HTTPD_MAX_CONNS; i++) {
		struct pollfd p = { .fd = idle[i], .events = POLLIN };

		cr_assert_eq(poll(&p, 1, 0), 0,
		             "idle connection %d was closed too", i);
	}
	for (int i = 0; i < HTTPD_MAX_CONNS; i++)
		close(idle[i]);
	r = REQ(s->port, "GET /healthz HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 200 OK\r\n", 17), 0, "%s", r);
	free(r);
	srv_stop(s);
}

/* ---- bytes after the head ----------------------------------------------
 * httpd reads no body and no second request. Bytes that come after the
 * head (a body a client sends anyway, a pipelined request) are still unread
 * when the response is out; closing then resets the connection, and the
 * reset destroys what of the response the client had not taken yet. (A
 * head that declares a body is refused, 413: httpd_check_head().) */

#define BIG_BODY 200000

static int
big_handler(void *arg, const struct httpd_req *rq, char **body, size_t *blen,
            const char **ctype)
{
	*body = malloc(BIG_BODY);
	memset(*body, 'b', BIG_BODY);
	*blen = BIG_BODY;
	*ctype = "text/plain";
	return 200;
}

Test(httpd, bytes_after_the_head_do_not_cut_the_response)
{
	struct srv        *s = srv_start(0);
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct timeval     tv = { .tv_sec = 5 };
	struct pollfd      p;
	struct timespec    ts = { 0, 200000000 };
	static const char  head[] = "GET /big HTTP/1.1\r\n\r\n";
	int                fd = socket(AF_INET, SOCK_STREAM, 0), rcv = 4096;
	size_t             cap = BIG_BODY + 4096, len = 0;
	char              *buf = malloc(cap);
	ssize_t            n;

	httpd_set_handler(s->h, "/big", big_handler, NULL); /* no request yet */
	/* a small window: most of the response waits in the server's socket */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	sin.sin_port = htons((uint16_t)s->port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	send_all(fd, head, sizeof(head) - 1);
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	cr_assert_eq(poll(&p, 1, 2000), 1, "the response starts");
	send_all(fd, "hello", 5); /* stray bytes, after the server answered */
	nanosleep(&ts, NULL);
	while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0)
		len += (size_t)n;
	cr_assert_eq(n, 0, "recv: %s after %zu bytes", strerror(errno), len);
	buf[len] = '\0';
	cr_assert_eq(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
	cr_assert_eq(strlen(body_of(buf)), BIG_BODY, "got %zu of %d bytes",
	             strlen(body_of(buf)), BIG_BODY);
	close(fd);
	free(buf);
	srv_stop(s);
}

static int
json_handler(void *arg, const struct httpd_req *rq, char **body, size_t *blen,
             const char **ctype)
{
	*body = strdup("{\"error\":\"x\"}\n");
	*blen = strlen(*body);
	return 405;
}

/* A HEAD answered by a handler (the admin API) has no body either. */
Test(httpd, head_to_a_handler_has_no_body)
{
	struct srv *s = srv_start(0);
	char       *r;

	httpd_set_handler(s->h, "/admin/", json_handler, NULL);
	r = REQ(s->port, "HEAD /admin/key HTTP/1.1\r\n\r\n");
	cr_assert_eq(strncmp(r, "HTTP/1.1 405 ", 13), 0, "%s", r);
	cr_assert_str_eq(body_of(r), "", "a HEAD response with a body: %s", r);
	free(r);
	r = REQ(s->port, "GET /admin/key HTTP/1.1\r\n\r\n");
	cr_assert_str_eq(body_of(r), "{\"error\":\"x\"}\n");
	free(r);
	srv_stop(s);
}

Test(httpd, bad_addresses)
{
	static const char *const bad[] = {
		"nonsense",        "127.0.0.1",     "127.0.0.1:",
		"127.0.0.1:99999", "127.0.0.1:12x", "[::1",
		"[::1]9465",       "::1:9465",      "256.1.1.1:9465",
	};
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct httpd   *h, *h2;
	char           *err = NULL, addr[64];

	log_level = LOG_ERROR;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = NULL;
		h = httpd_new(loop, bad[i], NULL, NULL, &err);
		cr_assert_null(h, "accepted %s", bad[i]);
		cr_assert_not_null(err);
		cr_assert_not_null(strstr(err, "httpd: "), "%s", err);
		free(err);
	}
	/* A port in use is reported, not fatal. */
	h = httpd_new(loop, "127.0.0.1:0", NULL, NULL, &err);
	cr_assert_not_null(h);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", httpd_port(h));
	err = NULL;
	h2 = httpd_new(loop, addr, NULL, NULL, &err);
	cr_assert_null(h2);
	cr_assert_not_null(strstr(err, "listen"), "%s", err);
	free(err);
	httpd_free(h);
	httpd_free(NULL);
	ev_loop_destroy(loop);
}
