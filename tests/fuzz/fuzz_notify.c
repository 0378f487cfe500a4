/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: untrusted NOTIFY payloads all the way to limit checks.
 * The input is a NOTIFY payload (messages and typed args, as HAProxy would
 * send); each decoded message goes through policy_build_checks() under a
 * policy with every template kind (strings, IPv4/IPv6 prefixes, composite
 * keys, cost args, failure results, concurrency ids), then decide() runs on
 * made-up results and the ACK is encoded. Checks: keys stay within
 * POLICY_KEY_MAX, keep their hash tag intact, and nothing crashes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decide.h"
#include "policy.h"
#include "spop.h"

static struct policy *pol;

static const char policy_yaml[] =
	"plans:\n"
	"  free: { rate: 10/s, burst: 5, quota: 100/month }\n"
	"  pro:  { rate: 100/s, burst: 50, quota: none }\n"
	"tenants: { acme: pro }\n"
	"plan_lookup: { arg: plan, default: free }\n"
	"rules:\n"
	"  - { name: t, message: m, key: \"tenant:{tenant}\", plan: rate }\n"
	"  - { name: q, message: m, key: \"tenant:{tenant}\", algorithm: fixed-window, plan: quota }\n"
	"  - { name: ip, message: m, key: \"ip:{ip/48}:{route}\", rate: 5/s, missing: skip }\n"
	"  - { name: c, message: m, key: \"b:{tenant}\", algorithm: token-bucket, rate: 100/s, burst: 100, cost: \"{size}\", missing: deny }\n"
	"  - { name: cc, message: m, key: \"x:{tenant}\", algorithm: concurrency, limit: 2, lease: 1m, id: \"{id}\", release: done }\n"
	"  - { name: l, message: login, key: \"u:{user}:{ip}\", algorithm: sliding-log, limit: 5, window: 15m, count: failures, missing: \"ip:{ip/64}\" }\n";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char  path[] = "/tmp/fuzz-notify-XXXXXX";
	char *err = NULL;
	int   fd = mkstemp(path);

	if (fd == -1 || write(fd, policy_yaml, sizeof(policy_yaml) - 1) < 0)
		abort();
	close(fd);
	pol = policy_load(path, &err);
	unlink(path);
	if (pol == NULL) {
		fprintf(stderr, "fuzz_notify policy: %s\n", err);
		abort();
	}
	return 0;
}

static void
check_keys(const struct check *c, int n)
{
	for (int i = 0; i < n; i++) {
		if (c[i].keylen > POLICY_KEY_MAX) /* binary values are fine */
			abort();
		if (c[i].kind == CHECK_EVAL && c[i].keylen > 0 &&
		    (memchr(c[i].key, '}', c[i].keylen) !=
		     c[i].key + c[i].keylen - 1))
			abort(); /* a value broke out of the hash tag */
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct spop_iter it = { (const char *)data, (const char *)data + size };
	struct check     checks[POLICY_MAX_CHECKS];
	struct outcome   out[POLICY_MAX_CHECKS];
	struct spop_message m;
	struct decision     d;
	struct spop_writer  w;
	char                buf[16384];
	int                 st, n;

	while (spop_next_message(&it, &m, &st) == 1) {
		n = policy_build_checks(pol, &m, checks, POLICY_MAX_CHECKS);
		if (n < 0 || n > POLICY_MAX_CHECKS)
			abort();
		check_keys(checks, n);
		for (int i = 0; i < n; i++) {
			/* the whole outcome, as req.c fills it: lim NULL is
			 * the check's own limits */
			out[i] = (struct outcome){
				.src = (enum outcome_src)(i % 4),
				.res = { i % 3 - 1, i, i * 1000, i * 999,
				         i * 1001 },
			};
		}
		decide(checks, out, n, HEADERS_BOTH, &d);
		spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 1, 1);
		decide_encode(&d, &w);
		if (spop_w_end(&w) < 0)
			abort();
	}
	return 0;
}
