/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the policy file's parser (policy_parse.c, yamlkw.c,
 * keys.c, cidr.c, policy_allow.c), which takes whatever text an operator,
 * a config-management template or a typo puts in policy.yaml, at start,
 * on `-c` and on every SIGHUP. The input is the file's bytes, loaded
 * through an in-memory file (memfd) so that nothing touches the disk.
 * Checks: nothing crashes or leaks; a refused file comes with an error
 * text, a loaded one without (an empty file is valid: no rules, with a
 * warning); every rule of a loaded policy has a name and a message, and
 * the policy drops its reference cleanly.
 * It does not run the policy on requests: fuzz_notify does that.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "policy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int  memfd = -1;
static char path[64];

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int null = open("/dev/null", O_RDONLY);

	(void)argc;
	(void)argv;
	/* admin.token_file may name any path, /dev/stdin too: never block */
	if (null == -1 || dup2(null, STDIN_FILENO) == -1)
		abort();
	close(null);
	if ((memfd = memfd_create("fuzz-policy", 0)) == -1)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

static void
check_loaded(const struct policy *p)
{
	if (p->nrules < 0)
		abort();
	for (int i = 0; i < p->nrules; i++) {
		const struct rule *r = &p->rules[i];

		if (r->name == NULL || r->message == NULL)
			abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy *p;
	char          *err = NULL, *warn = NULL;

	if (ftruncate(memfd, 0) == -1 ||
	    pwrite(memfd, data, size, 0) != (ssize_t)size)
		abort();
	p = policy_load_with_warnings(path, &err, &warn);
	if ((p == NULL) == (err == NULL))
		abort(); /* refused without a reason, or loaded with errors */
	if (p != NULL)
		check_loaded(p);
	policy_unref(p);
	free(err);
	free(warn);
	return 0;
}
