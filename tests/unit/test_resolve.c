/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resolve.c: host names resolved off the caller's thread. A fake
 * getaddrinfo that blocks until the test lets it go stands for a slow DNS
 * server: resolve_addr() must answer while it is blocked.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "resolve.h"
#include "util.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  cv = PTHREAD_COND_INITIALIZER;
static int             released; /* the fake may answer */
static int             calls;    /* lookups the fake was asked for */
static const char     *answer = "127.0.0.9"; /* NULL: fail */

static int
fake_gai(const char *node, const char *service, const struct addrinfo *hints,
         struct addrinfo **res)
{
	pthread_mutex_lock(&mu);
	calls++;
	pthread_cond_broadcast(&cv);
	while (!released)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	if (answer == NULL || hints->ai_family != AF_INET)
		return EAI_NONAME;
	return getaddrinfo(answer, service, hints, res);
}

static void
setup(void)
{
	released = 0;
	calls = 0;
	answer = "127.0.0.9";
	resolve_set_gai(fake_gai);
}

static void
release(void)
{
	pthread_mutex_lock(&mu);
	released = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Polls resolve_addr() until it gives an address (the fake, released,
 * answers at once); NULL after 5 s. */
static const char *
addr_when_ready(const char *host, char *buf)
{
	const char *why;

	for (int i = 0; i < 500; i++) {
		const char *a = resolve_addr(host, buf, &why);

		if (a != NULL)
			return a;
		usleep(10000);
	}
	return NULL;
}

Test(resolve, a_numeric_host_is_used_as_it_is, .init = setup)
{
	char        buf[RESOLVE_ADDR_MAX];
	const char *why = NULL;

	cr_assert_str_eq(resolve_addr("10.1.2.3", buf, &why), "10.1.2.3");
	cr_assert_str_eq(resolve_addr("::1", buf, &why), "::1");
	cr_assert_eq(calls, 0);
}

Test(resolve, a_new_name_answers_at_once_while_dns_hangs, .init = setup)
{
	char        buf[RESOLVE_ADDR_MAX];
	const char *why = NULL;

	cr_assert_null(resolve_addr("redis-a.example", buf, &why));
	cr_assert_str_eq(why, "resolving the host name");
	/* the lookup is running in the resolver thread and blocked there */
	pthread_mutex_lock(&mu);
	while (calls == 0)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	cr_assert_null(resolve_addr("redis-a.example", buf, &why));
	cr_assert_null(resolve_connect("redis-a.example", 6379, &why));
	release();
	cr_assert_str_eq(addr_when_ready("redis-a.example", buf), "127.0.0.9");
	cr_assert_eq(calls, 1, "one lookup for all those asks");
}

Test(resolve, a_failed_lookup_says_so_and_is_retried, .init = setup)
{
	char        buf[RESOLVE_ADDR_MAX];
	const char *why = NULL;

	answer = NULL;
	release();
	cr_assert_null(resolve_addr("nowhere.example", buf, &why));
	for (int i = 0; i < 500 && strcmp(why, "resolving the host name") == 0;
	     i++) {
		usleep(10000);
		resolve_addr("nowhere.example", buf, &why);
	}
	cr_assert_str_eq(why, "host name lookup failed (see resolve_failed)");
	answer = "127.0.0.7";
	cr_assert_str_eq(addr_when_ready("nowhere.example", buf), "127.0.0.7",
	                 "retried after RESOLVE_RETRY_S");
}

Test(resolve, warm_resolves_in_the_callers_thread, .init = setup)
{
	char        buf[RESOLVE_ADDR_MAX];
	const char *why = NULL;

	release();
	answer = "127.0.0.8";
	resolve_warm("redis-b.example");
	cr_assert_eq(calls, 1);
	cr_assert_str_eq(resolve_addr("redis-b.example", buf, &why),
	                 "127.0.0.8");
	cr_assert_eq(calls, 1, "a fresh answer is not looked up again");
}
