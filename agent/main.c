/*
 * spoa-ratelimit: command line, policy load, signals, the main loop.
 * Nothing else: the work happens in the workers (server.c).
 *
 * The main thread owns the default libev loop, which watches the signals
 * (SIGHUP reloads the policy, SIGTERM and SIGINT drain and exit) and serves
 * /metrics and /healthz. Workers are reached only through server_reload()
 * and server_stop().
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "httpd.h"
#include "log.h"
#include "metrics.h"
#include "policy.h"
#include "server.h"
#include "util.h"

#ifndef VERSION
#define VERSION "0.1.0"
#endif
#define DEFAULT_POLICY "/etc/spoa-ratelimit/policy.yaml"

struct opts {
	const char *path;
	const char *listen;
	const char *redis_url;
	const char *metrics;
	int         workers;
	int         check;
};

static struct server *server;
static struct opts    opts;

static void
usage(FILE *f)
{
	fprintf(f,
"Usage: spoa-ratelimit [OPTION]...\n"
"HAProxy SPOE agent that enforces rate limits held in Redis.\n"
"\n"
"  -f, --policy FILE    policy file (default " DEFAULT_POLICY ")\n"
"  -c, --check          check the policy file and exit (0 valid, 1 not)\n"
"  -l, --listen ADDR    listen on ADDR instead of the policy's listen:\n"
"                       (host:port, [v6]:port or unix:/path; comma-separated)\n"
"  -r, --redis URL      use URL instead of the policy's redis.url\n"
"  -m, --metrics ADDR   serve /metrics and /healthz on ADDR (host:port)\n"
"  -w, --workers N      worker threads (default: the policy's workers:)\n"
"  -v, --verbose        log more (repeat for debug)\n"
"  -q, --quiet          log errors only\n"
"  -h, --help           show this help and exit\n"
"  -V, --version        show the version and exit\n"
"\n"
"Signals: SIGHUP reloads the policy (a bad file is refused and the old one\n"
"kept); SIGTERM and SIGINT answer what is in flight, then exit.\n");
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
	int ch;
	char *end;

	opts.path = DEFAULT_POLICY;
	while ((ch = getopt_long(argc, argv, "f:cl:r:m:w:vqhV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f': opts.path = optarg; break;
		case 'c': opts.check = 1; break;
		case 'l': opts.listen = optarg; break;
		case 'r': opts.redis_url = optarg; break;
		case 'm': opts.metrics = optarg; break;
		case 'w':
			opts.workers = (int)strtol(optarg, &end, 10);
			if (*end != '\0' || opts.workers < 1 || opts.workers > 64) {
				fprintf(stderr, "spoa-ratelimit: -w wants 1..64\n");
				exit(2);
			}
			break;
		case 'v': log_level = log_level < LOG_DEBUG ? log_level + 1 : LOG_DEBUG; break;
		case 'q': log_level = LOG_ERROR; break;
		case 'h': usage(stdout); exit(0);
		case 'V': printf("spoa-ratelimit %s\n", VERSION); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spoa-ratelimit: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
}

static void
publish_rule_names(const struct policy *p)
{
	const char *names[METRICS_MAX_RULES];
	int n = p->nrules < METRICS_MAX_RULES ? p->nrules : METRICS_MAX_RULES;

	for (int i = 0; i < n; i++)
		names[i] = p->rules[i].name;
	metrics_set_rules(names, n);
}

static struct policy *
load(int quiet_ok)
{
	char *err = NULL, *warn = NULL;
	struct policy *p = policy_load2(opts.path, &err, &warn);

	if (warn != NULL)
		fputs(warn, stderr);
	if (p == NULL) {
		fputs(err ? err : "policy: cannot load\n", stderr);
		if (err != NULL && err[strlen(err) - 1] != '\n')
			fputc('\n', stderr);
	} else if (!quiet_ok) {
		log_info("policy_loaded", "path=%s rules=%d", opts.path, p->nrules);
	}
	free(err);
	free(warn);
	return p;
}

static void
sighup_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct policy *p = load(1);

	if (p == NULL) {
		log_error("reload_failed", "path=%s kept=old", opts.path);
		metrics_policy_reload(false);
		return;
	}
	publish_rule_names(p);
	server_reload(server, p);
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

static int
healthy(void *arg)
{
	return server_healthy(server);
}

int
main(int argc, char **argv)
{
	struct ev_loop *loop;
	struct policy *p;
	struct httpd *h = NULL;
	ev_signal shup, sterm, sint;
	char *err = NULL;

	parse_args(argc, argv);
	if ((p = load(opts.check)) == NULL)
		return 1;
	if (opts.check) {
		printf("%s: OK (%d rules)\n", opts.path, p->nrules);
		policy_unref(p);
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	metrics_init(VERSION);
	publish_rule_names(p);
	metrics_policy_loaded();
	loop = ev_default_loop(EVFLAG_AUTO);
	server = server_new(p, opts.listen ? opts.listen : p->listen,
	                    opts.workers ? opts.workers : p->workers,
	                    opts.redis_url, &err);
	if (server == NULL) {
		log_error("startup_failed", "error=\"%s\"", err);
		return 1;
	}
	if (opts.metrics != NULL &&
	    (h = httpd_new(loop, opts.metrics, healthy, NULL, &err)) == NULL) {
		log_error("startup_failed", "error=\"metrics: %s\"", err);
		server_stop(server);
		return 1;
	}
	policy_unref(p);
	ev_signal_init(&shup, sighup_cb, SIGHUP);
	ev_signal_init(&sterm, sigterm_cb, SIGTERM);
	ev_signal_init(&sint, sigterm_cb, SIGINT);
	ev_signal_start(loop, &shup);
	ev_signal_start(loop, &sterm);
	ev_signal_start(loop, &sint);
	server_start(server);
	log_info("started", "version=%s workers=%d", VERSION, server->nworkers);
	ev_run(loop, 0);
	server_stop(server);
	httpd_free(h);
	ev_loop_destroy(loop);
	log_info("stopped", NULL);
	return 0;
}
