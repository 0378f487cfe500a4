/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spoa-ratelimit: command line, policy load, signals, the main loop.
 * Nothing else: the work happens in the workers (server.c).
 *
 * The main thread owns the default libev loop, which watches the signals
 * (SIGHUP reloads the policy, SIGTERM and SIGINT drain and exit) and serves
 * /metrics and /healthz (on -m ADDR, else on the policy's metrics.listen,
 * re-bound when a reload changes it). Workers are reached only through
 * server_reload() and server_stop().
 *
 * The log level is the policy's log.level, applied at startup and on each
 * reload, unless -v or -q was given: the command line wins.
 */
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "admin.h"
#include "admincli.h"
#include "httpd.h"
#include "log.h"
#include "metrics.h"
#include "ovcli.h"
#include "policy.h"
#include "policy_orphan.h"
#include "server.h"
#include "store.h"
#include "util.h"

#ifndef VERSION
#define VERSION "0.1.0"
#endif
#define COPYRIGHT_YEARS "2026"
#define LICENSE_LINE                                                           \
	"License: Apache-2.0 (the LICENSE file; "                              \
	"https://www.apache.org/licenses/LICENSE-2.0)."
#define PROG           "spoa-ratelimit"
#define DEFAULT_POLICY "/etc/spoa-ratelimit/policy.yaml"

struct opts {
	const char *path;
	const char *listen;
	const char *redis_url;
	const char *metrics;
	int         workers;
	int         check;
	int         log_cli; /* -v or -q given: log.level is ignored */
};

static struct server  *server;
static struct opts     opts;
static struct ev_loop *main_loop;
static struct httpd   *httpd; /* NULL: no metrics server */
static char            httpd_addr[POLICY_ADDR_MAX]; /* where it listens */
static struct admin   *admin;                       /* NULL: no admin API */
static struct httpd   *admin_httpd; /* its own listener, or NULL */
static int  admin_on_metrics;       /* admin served by <httpd> (same address) */
static char admin_addr[POLICY_ADDR_MAX]; /* admin.listen, until restart */

/* --help: GNU style, on stdout, exit 0. */
static void
help(void)
{
	printf("Usage: spoa-ratelimit [OPTION]...\n"
	       "HAProxy SPOE agent that enforces rate limits held in Redis.\n"
	       "\n"
	       "  -f, --policy FILE    policy file (default " DEFAULT_POLICY
	       ")\n"
	       "  -c, --check          check the policy file and exit (0 valid, 1 not)\n"
	       "  -l, --listen ADDR    listen on ADDR instead of the policy's listen:\n"
	       "                       (host:port, [v6]:port or unix:/path; comma-separated)\n"
	       "  -r, --redis URL      use URL instead of the policy's redis.url\n"
	       "  -m, --metrics ADDR   serve /metrics and /healthz on ADDR (host:port)\n"
	       "                       instead of the policy's metrics.listen\n"
	       "  -w, --workers N      worker threads (default: the policy's workers:)\n"
	       "  -v, --verbose        log debug lines too; overrides log.level\n"
	       "  -q, --quiet          log errors only; overrides log.level\n"
	       "  -h, --help           show this help and exit\n"
	       "  -V, --version        show the version and exit\n"
	       "\n"
	       "Signals: SIGHUP reloads the policy (a bad file is refused and the old one\n"
	       "kept); SIGTERM and SIGINT answer what is in flight, then exit.\n"
	       "\n"
	       "Operators: spoa-ratelimit key show|reset ..., spoa-ratelimit top ...,\n"
	       "spoa-ratelimit override set|del|list ... (see the man page,\n"
	       "ADMINISTRATION; override --help).\n"
	       "\n"
	       "Exit status: 0 on a normal stop or a valid -c check, 1 when the policy\n"
	       "is invalid or startup fails, 2 on a usage error.\n"
	       "\n"
	       "Full documentation: man 8 spoa-ratelimit\n");
}

/* --version: GNU style, on stdout, exit 0. */
static void
version(void)
{
	printf(PROG " " VERSION "\n"
	            "Copyright (C) " COPYRIGHT_YEARS
	            " the spoa-ratelimit authors.\n" LICENSE_LINE "\n"
	            "There is NO WARRANTY, to the extent permitted by law.\n");
}

/* The exit status after --help or --version: 1 when stdout could not
 * be written (a full disk, a closed pipe), as GNU programs do. */
static int
close_stdout(void)
{
	if (fflush(stdout) == EOF || ferror(stdout)) {
		fprintf(stderr, PROG ": write error on standard output\n");
		return 1;
	}
	return 0;
}

/* A usage error: one line saying what, one saying where help is, exit 2. */
static void __attribute__((noreturn)) usage_error(void)
{
	fprintf(stderr, "Try '" PROG " --help' for more information.\n");
	exit(2);
}

static void
parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "policy", required_argument, NULL, 'f' },
		{ "check", no_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'l' },
		{ "redis", required_argument, NULL, 'r' },
		{ "metrics", required_argument, NULL, 'm' },
		{ "workers", required_argument, NULL, 'w' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int   ch;
	char *end;

	opts.path = DEFAULT_POLICY;
	while ((ch = getopt_long(argc, argv, "f:cl:r:m:w:vqhV", longopts,
	                         NULL)) != -1) {
		switch (ch) {
		case 'f':
			opts.path = optarg;
			break;
		case 'c':
			opts.check = 1;
			break;
		case 'l':
			opts.listen = optarg;
			break;
		case 'r':
			opts.redis_url = optarg;
			break;
		case 'm':
			opts.metrics = optarg;
			break;
		case 'w':
			opts.workers = (int)strtol(optarg, &end, 10);
			if (*end != '\0' || opts.workers < 1 ||
			    opts.workers > 64) {
				fprintf(stderr, PROG ": -w wants 1..64\n");
				usage_error();
			}
			break;
		case 'v':
			log_level = log_level < LOG_DEBUG ? log_level + 1
			                                  : LOG_DEBUG;
			opts.log_cli = 1;
			break;
		case 'q':
			log_level = LOG_ERROR;
			opts.log_cli = 1;
			break;
		case 'h':
			help();
			exit(close_stdout());
		case 'V':
			version();
			exit(close_stdout());
		default:
			usage_error(); /* getopt said what */
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n",
		        argv[optind]);
		usage_error();
	}
}

static void
publish_rule_names(struct policy *p)
{
	const char *names[METRICS_MAX_RULES];
	int n = p->nrules < METRICS_MAX_RULES ? p->nrules : METRICS_MAX_RULES;

	for (int i = 0; i < n; i++)
		names[i] = p->rules[i].name;
	metrics_set_rules(names, n);
	/* each rule keeps its own slot: a request decided under the old
	 * policy after a reload is counted under its own rule's name */
	for (int i = 0; i < p->nrules; i++)
		p->rules[i].metrics_slot = metrics_rule_slot(p->rules[i].name);
}

/* The policy's log.level, unless -v or -q said otherwise; a policy
 * without one means info again. */
static void
apply_log_level(const struct policy *p)
{
	if (!opts.log_cli)
		log_level = p->log_level >= 0 ? p->log_level : LOG_INFO;
}

/* Where /metrics is served: -m wins over metrics.listen; NULL: nowhere. */
static const char *
metrics_addr(const struct policy *p)
{
	if (opts.metrics != NULL)
		return opts.metrics;
	return p->metrics_listen[0] != '\0' ? p->metrics_listen : NULL;
}

static int
healthy(void *arg)
{
	return server_healthy(server);
}

static struct httpd *
open_httpd(const char *addr, char **err)
{
	return httpd_new(main_loop, addr, healthy, NULL, err);
}

/* The metrics listener <httpd> is let go: closed, unless the admin API
 * is served on it, whose address holds until a restart: then it stays
 * as the admin API's own listener. */
static void
metrics_release(void)
{
	if (httpd != NULL && admin_on_metrics) {
		admin_httpd = httpd;
		admin_on_metrics = 0;
	} else {
		httpd_free(httpd);
	}
	httpd = NULL;
}

/* Serves /metrics and /healthz on <addr> (NULL: stops serving), keeping
 * what runs when it already listens there. A new address is bound before
 * the old one is closed; when that fails (the same port on another host
 * part, say) the old one is closed first and the new one tried again, and
 * if it still fails the old address is restored. The admin API keeps its
 * address: a listener it shares is not closed but left to it, and the
 * admin API's own listener is taken over when <addr> is its address.
 * Returns 0, or -1 with the error logged. */
static int
metrics_bind(const char *addr)
{
	struct httpd *h;
	char         *err = NULL;

	if (addr != NULL && httpd != NULL && strcmp(addr, httpd_addr) == 0)
		return 0;
	if (addr == NULL) {
		if (httpd != NULL)
			log_info("metrics_stopped", "addr=%s", httpd_addr);
		metrics_release();
		httpd_addr[0] = '\0';
		return 0;
	}
	if (admin_httpd != NULL && strcmp(addr, admin_addr) == 0) {
		/* it serves /metrics and /healthz already */
		metrics_release();
		httpd = admin_httpd;
		admin_httpd = NULL;
		admin_on_metrics = 1;
		snprintf(httpd_addr, sizeof(httpd_addr), "%s", addr);
		log_info("metrics_listening", "addr=%s shared=admin", addr);
		return 0;
	}
	if ((h = open_httpd(addr, &err)) == NULL && httpd != NULL &&
	    !admin_on_metrics) {
		free(err);
		err = NULL;
		httpd_free(httpd);
		httpd = NULL;
		if ((h = open_httpd(addr, &err)) == NULL) {
			char *e2 = NULL;

			httpd = open_httpd(httpd_addr, &e2);
			free(e2);
		}
	}
	if (h == NULL) {
		log_error("metrics_failed", "addr=%s error=\"%s\" kept=%s",
		          addr, err ? err : "?", httpd ? httpd_addr : "none");
		free(err);
		if (httpd == NULL)
			httpd_addr[0] = '\0';
		return -1;
	}
	metrics_release();
	httpd = h;
	snprintf(httpd_addr, sizeof(httpd_addr), "%s", addr);
	return 0; /* httpd logged httpd_listening */
}

/* Logs each line of <text> (NULL: none) as "msg=<msg> detail=..." at
 * <level>, quoted for logfmt: the parser's reports hold quotes ("unknown
 * plan \"gold\""), and a line a log collector cannot split is worse than
 * none. A line past 509 bytes is cut, and says so (LOG_CUT). */
static void
log_report(int level, const char *msg, const char *text)
{
	char        val[512];
	const char *s, *nl;
	size_t      n;

	for (; text != NULL && *text != '\0'; text = *nl ? nl + 1 : nl) {
		nl = strchrnul(text, '\n');
		for (n = 0, s = text; s < nl && n < sizeof(val) - 3; s++) {
			if (*s == '"' || *s == '\\')
				val[n++] = '\\';
			val[n++] = *s;
		}
		val[n] = '\0';
		if (n > 0)
			log_msg(level, msg, "detail=\"%s\"%s", val,
			        LOG_CUT(s < nl));
	}
}

/* Reads the policy file. With -c the parser's errors and warnings go to
 * stderr as it wrote them (file:line:col: field: message), for a person;
 * otherwise they are log lines (msg=policy_error, msg=policy_warning)
 * like any other, under the new file's log.level when it loaded. At
 * <startup> a good file is logged as policy_loaded (a reload logs
 * reloaded instead). Returns the policy or NULL. */
static struct policy *
load(int startup)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(opts.path, &err, &warn);

	if (opts.check) {
		if (warn != NULL)
			fputs(warn, stderr);
		if (p == NULL) {
			fputs(err ? err : "policy: cannot load\n", stderr);
			if (err != NULL && err[strlen(err) - 1] != '\n')
				fputc('\n', stderr);
		}
	} else {
		if (p != NULL)
			apply_log_level(p);
		log_report(LOG_WARN, "policy_warning", warn);
		if (p == NULL)
			log_report(LOG_ERROR, "policy_error",
			           err ? err : "policy: cannot load");
		else if (startup)
			log_info("policy_loaded", "path=%s rules=%d", opts.path,
			         p->nrules);
	}
	free(err);
	free(warn);
	return p;
}

/* The policy the agent started with: what a reload cannot change runs
 * as it says until the next restart. */
static struct policy *booted;
/* The policy running now (a reference): what a reload replaces. */
static struct policy *running;

static int
str_differs(const char *a, const char *b)
{
	return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

static void
restart_only(const char *field, int differs)
{
	if (differs)
		log_warn("needs_restart", "field=%s kept=running", field);
}

/* Logs each field of <p> a reload cannot apply and that differs from what
 * runs (a command-line -l, -w or -r makes the file's value moot). The
 * local tier's tables are sized at startup and hold state (fail: local
 * counts, leases): resizing them would forget it. The workers' stores
 * take redis.* when they start. */
static void
warn_restart_only(const struct policy *p)
{
	const struct policy *b = booted;

	restart_only("listen",
	             !opts.listen && str_differs(b->listen, p->listen));
	restart_only("workers", !opts.workers && b->workers != p->workers);
	restart_only("redis.url", !opts.redis_url && str_differs(b->redis_url,
	                                                         p->redis_url));
	restart_only("redis.username",
	             str_differs(b->redis_username, p->redis_username));
	restart_only("redis.password",
	             str_differs(b->redis_password, p->redis_password));
	restart_only("redis.batch_wait",
	             b->redis_batch_wait_us != p->redis_batch_wait_us);
	restart_only("local.max_keys", b->local_max_keys != p->local_max_keys);
	restart_only("overrides", b->overrides != p->overrides);
	restart_only("admin.listen", strcmp(b->admin_listen, p->admin_listen));
}

/* The admin API, when the policy has a token: on the metrics listener
 * when admin.listen is that address, else on a listener of its own. Its
 * address holds until a restart. Returns 0, or -1 logged. */
static int
admin_start(struct policy *p)
{
	char         *err = NULL;
	struct httpd *h = httpd;

	if (p->admin_token == NULL)
		return 0;
	admin = admin_new(main_loop, p, opts.redis_url);
	snprintf(admin_addr, sizeof(admin_addr), "%s", p->admin_listen);
	if (h == NULL || strcmp(httpd_addr, p->admin_listen) != 0) {
		h = admin_httpd = httpd_new(main_loop, p->admin_listen, healthy,
		                            NULL, &err);
		if (h == NULL) {
			log_error("startup_failed", "error=\"admin: %s\"", err);
			free(err);
			return -1;
		}
	}
	httpd_set_handler(h, "/admin/", admin_handle, admin);
	admin_on_metrics = h == httpd;
	log_info("admin_listening", "addr=%s", p->admin_listen);
	return 0;
}

static void
sighup_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct policy *p = load(0);

	if (p == NULL) {
		log_error("reload_failed", "path=%s kept=old", opts.path);
		metrics_policy_reload(false);
		return;
	}
	publish_rule_names(p);
	warn_restart_only(p);
	policy_note_orphans(p, running, util_now_us());
	policy_unref(running);
	running = policy_ref(p);
	if (admin != NULL)
		admin_set_policy(admin, p);
	server_reload(server, p);
	metrics_bind(metrics_addr(p));
	log_info("reloaded", "path=%s rules=%d", opts.path, p->nrules);
	policy_unref(p);
	metrics_policy_reload(true);
}

static void
sigterm_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	log_info("stopping", "signal=%d", w->signum);
	ev_break(loop, EVBREAK_ALL);
}

int
main(int argc, char **argv)
{
	struct ev_loop *loop;
	struct policy  *p;
	ev_signal       shup, sterm, sint;
	sigset_t        early;
	char           *err = NULL;
	int             nworkers;

	if (argc > 1 && strcmp(argv[1], "override") == 0)
		return ovcli_main(argc - 1, argv + 1);
	if (argc > 1 && admincli_is(argv[1]))
		return admincli_main(argc, argv);
	parse_args(argc, argv);
	/* Until the handlers are in place (ev_signal_start, below) these
	 * signals wait: a SIGHUP's default action would kill the agent
	 * during startup (a reload right after a start), a SIGTERM would
	 * skip the drain and leave a unix socket file. */
	sigemptyset(&early);
	sigaddset(&early, SIGHUP);
	sigaddset(&early, SIGTERM);
	sigaddset(&early, SIGINT);
	if (!opts.check)
		pthread_sigmask(SIG_BLOCK, &early, NULL);
	if ((p = load(1)) == NULL)
		return 1;
	if (opts.check) {
		printf("%s: OK (%d rules)\n", opts.path, p->nrules);
		policy_unref(p);
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	/* One malloc arena for all threads. With glibc's default of one per
	 * worker, what a worker frees stays in its own arena: after a burst
	 * of connections the agent held the sum of each worker's peak share
	 * rather than the peak (bounds.sh). The request path allocates only
	 * per Redis batch, mostly from the per-thread cache, so the one
	 * arena's lock is not contended. */
	mallopt(M_ARENA_MAX, 1);
	metrics_init(VERSION);
	publish_rule_names(p);
	metrics_policy_loaded();
	loop = main_loop = ev_default_loop(EVFLAG_AUTO);
	store_resolve_url(opts.redis_url ? opts.redis_url : p->redis_url);
	nworkers = opts.workers ? opts.workers : p->workers; /* both >= 1 */
	server = server_new(p, opts.listen ? opts.listen : p->listen, nworkers,
	                    opts.redis_url, &err);
	if (server == NULL) {
		log_error("startup_failed", "error=\"%s\"", err);
		free(err);
		policy_unref(p);
		ev_loop_destroy(loop);
		return 1;
	}
	if (metrics_bind(metrics_addr(p)) == -1) {
		log_error("startup_failed",
		          "error=\"metrics: cannot listen on %s\"",
		          metrics_addr(p));
		server_stop(server);
		policy_unref(p);
		ev_loop_destroy(loop);
		return 1;
	}
	if (admin_start(p) == -1) {
		server_stop(server);
		metrics_bind(NULL);
		policy_unref(p);
		ev_loop_destroy(loop);
		return 1;
	}
	booted = p; /* its reference, until exit */
	running = policy_ref(p);
	ev_signal_init(&shup, sighup_cb, SIGHUP);
	ev_signal_init(&sterm, sigterm_cb, SIGTERM);
	ev_signal_init(&sint, sigterm_cb, SIGINT);
	ev_signal_start(loop, &shup);
	ev_signal_start(loop, &sterm);
	ev_signal_start(loop, &sint);
	pthread_sigmask(SIG_UNBLOCK, &early, NULL); /* what came is handled */
	server_start(server);
	log_info("started", "version=%s workers=%d", VERSION, nworkers);
	ev_run(loop, 0);
	server_stop(server);
	metrics_bind(NULL); /* may leave its listener to the admin API */
	httpd_free(admin_httpd);
	admin_free(admin);
	policy_unref(running);
	policy_unref(booted);
	ev_loop_destroy(loop);
	log_info("stopped", NULL);
	return 0;
}
