/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the decision script's reply as it comes from Redis
 * (results.c). The first byte is the number of checks the batch asked
 * for, the rest the reply's bytes. Checks: nothing crashes or allocates
 * for a count the reply only claims, and a reply that decodes gives every
 * check an allowed of -1, 0 or 1, and the call a clock of 0 or more.
 */
#include <stdint.h>
#include <stdlib.h>

#include "results.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct results rs;
	size_t         nchecks;

	if (size < 1)
		return 0;
	nchecks = data[0];
	results_init(&rs);
	if (results_decode(&rs, (const char *)data + 1, size - 1, nchecks) ==
	    0) {
		if (rs.now_us < 0)
			abort();
		for (size_t k = 0; k < nchecks; k++) {
			struct lim_result r;

			results_get(&rs, k, &r);
			if (r.allowed < -1 || r.allowed > 1)
				abort();
		}
	}
	results_free(&rs);
	return 0;
}
