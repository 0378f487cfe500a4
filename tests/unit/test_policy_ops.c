/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the policy keys for operations (agent/policy/policy_parse.c):
 * metrics.listen, log.level, log.sample, and redis.password_env /
 * username_env (secrets read from the environment, never quoted in an
 * error). Each test writes its YAML into a temporary file.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "policy.h"

static char path[64];

static const char *
write_yaml(const char *text)
{
	FILE *f;
	int   fd;

	snprintf(path, sizeof(path), "/tmp/test_policy_ops.XXXXXX");
	fd = mkstemp(path);
	cr_assert(fd >= 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

static struct policy *
load_text(const char *text, char **err)
{
	char          *warn = NULL;
	struct policy *p;

	*err = NULL;
	p = policy_load_with_warnings(write_yaml(text), err, &warn);
	unlink(path);
	free(warn);
	return p;
}

static struct policy *
load_ok(const char *text)
{
	char          *err;
	struct policy *p = load_text(text, &err);

	cr_assert_not_null(p, "failed:\n%s", err ? err : "");
	return p;
}

/* Loads <text>, which must fail with the line "<path>:<where>: <what>". */
static void
fails_with(const char *text, const char *where, const char *what)
{
	char          *err, want[512];
	struct policy *p = load_text(text, &err);

	cr_assert_null(p, "loaded: %s", text);
	snprintf(want, sizeof(want), "%s:%s: %s\n", path, where, what);
	cr_assert(strstr(err, want), "want \"%s\" in:\n%s", want, err);
	free(err);
}

Test(policy_ops, defaults_no_metrics_no_level_no_sample)
{
	struct policy *p = load_ok("rules: []\n");

	cr_assert_str_eq(p->metrics_listen, "");
	cr_assert_eq(p->log_level, -1);
	cr_assert_eq(p->log_sample, 0);
	cr_assert_eq(p->log_sample_thresh, 0);
	policy_unref(p);
}

Test(policy_ops, parses_metrics_and_log)
{
	struct policy *p = load_ok("metrics: { listen: \"127.0.0.1:9465\" }\n"
	                           "log: { level: debug, sample: 0.25 }\n");

	cr_assert_str_eq(p->metrics_listen, "127.0.0.1:9465");
	cr_assert_eq(p->log_level, LOG_DEBUG);
	cr_assert_float_eq(p->log_sample, 0.25, 1e-12);
	cr_assert_eq(p->log_sample_thresh, 1ULL << 30);
	policy_unref(p);
}

Test(policy_ops, metrics_address_forms)
{
	static const char *const good[] = { "[::1]:9465", ":9465",
		                            "localhost:1", "0.0.0.0:65535" };
	char                     yaml[128];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct policy *p;

		snprintf(yaml, sizeof(yaml), "metrics: { listen: \"%s\" }\n",
		         good[i]);
		p = load_ok(yaml);
		cr_assert_str_eq(p->metrics_listen, good[i]);
		policy_unref(p);
	}
	fails_with(
		"metrics: { listen: \"::1:9465\" }\n", "1:20",
		"metrics.listen: IPv6 address must be in brackets: [::1]:port");
	fails_with(
		"metrics: { listen: \"127.0.0.1\" }\n", "1:20",
		"metrics.listen: expected host:port, [v6]:port or :port, got \"127.0.0.1\"");
	fails_with("metrics: { listen: \"127.0.0.1:0\" }\n", "1:20",
	           "metrics.listen: port must be between 1 and 65535");
	fails_with("metrics: { listen: \"h:99999\" }\n", "1:20",
	           "metrics.listen: port must be between 1 and 65535");
	fails_with("metrics: { listen: \"unix:/run/m.sock\" }\n", "1:20",
	           "metrics.listen: unix sockets are not supported: host:port");
	fails_with("metrics: 9465\n", "1:10",
	           "metrics: expected a mapping { listen }");
	fails_with("metrics:\n  port: 9465\n", "2:3",
	           "metrics.port: unknown key");
}

Test(policy_ops, log_errors)
{
	struct policy *p = load_ok("log: { level: error, sample: 1 }\n");

	cr_assert_eq(p->log_level, LOG_ERROR);
	cr_assert_eq(p->log_sample_thresh, 1ULL << 32);
	policy_unref(p);
	p = load_ok("log: { sample: 0.0000000001 }\n");
	cr_assert_eq(p->log_sample_thresh, 1, "a tiny rate is not off");
	policy_unref(p);
	fails_with(
		"log: { level: loud }\n", "1:15",
		"log.level: unknown level \"loud\" (one of: error, warn, info, debug)");
	fails_with(
		"log:\n  sample: 1.5\n", "2:11",
		"log.sample: expected a fraction between 0 and 1 such as 0.01, got \"1.5\"");
	fails_with(
		"log:\n  sample: -0.1\n", "2:11",
		"log.sample: expected a fraction between 0 and 1 such as 0.01, got \"-0.1\"");
	fails_with(
		"log:\n  sample: 1%\n", "2:11",
		"log.sample: expected a fraction between 0 and 1 such as 0.01, got \"1%\"");
	fails_with(
		"log:\n  sample: nan\n", "2:11",
		"log.sample: expected a fraction between 0 and 1 such as 0.01, got \"nan\"");
	fails_with("log: [info]\n", "1:6",
	           "log: expected a mapping { level, sample }");
	fails_with("log: { format: json }\n", "1:8", "log.format: unknown key");
}

Test(policy_ops, redis_secrets_from_the_environment)
{
	struct policy *p;

	setenv("TEST_RL_PW", "s3cret", 1);
	setenv("TEST_RL_USER", "limiter", 1);
	p = load_ok(
		"redis:\n  password_env: TEST_RL_PW\n  username_env: TEST_RL_USER\n");
	cr_assert_str_eq(p->redis_password, "s3cret");
	cr_assert_str_eq(p->redis_username, "limiter");
	policy_unref(p);
	/* without _env the inline values still work */
	p = load_ok("redis: { password: inline, username: u }\n");
	cr_assert_str_eq(p->redis_password, "inline");
	cr_assert_str_eq(p->redis_username, "u");
	policy_unref(p);
}

Test(policy_ops, redis_secret_errors_never_quote_the_secret)
{
	char          *err;
	struct policy *p;

	unsetenv("TEST_RL_UNSET");
	setenv("TEST_RL_EMPTY", "", 1);
	setenv("TEST_RL_PW", "do-not-print-me", 1);
	fails_with(
		"redis:\n  password_env: TEST_RL_UNSET\n", "2:17",
		"redis.password_env: environment variable TEST_RL_UNSET is not set");
	fails_with(
		"redis:\n  username_env: TEST_RL_EMPTY\n", "2:17",
		"redis.username_env: environment variable TEST_RL_EMPTY is empty");
	fails_with(
		"redis:\n  password: x\n  password_env: TEST_RL_PW\n", "3:17",
		"redis.password_env: redis.password is given too (line 2): use one");
	fails_with("redis:\n  password_env: \"A=B\"\n", "2:17",
	           "redis.password_env: not a variable name: \"A=B\"");
	fails_with(
		"redis:\n  password_env: [A]\n", "2:17",
		"redis.password_env: expected an environment variable name, got a list");
	/* an error elsewhere in a file that reads a secret: no secret in it */
	p = load_text(
		"redis:\n  password_env: TEST_RL_PW\n  timeout: forever\n",
		&err);
	cr_assert_null(p);
	cr_assert_null(strstr(err, "do-not-print-me"), "%s", err);
	free(err);
}
