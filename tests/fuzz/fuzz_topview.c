/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the agents' top views as a reader takes them from
 * Redis (rl:top:{RULE} and its bounds, topview.h), whoever wrote them.
 * The input is a series of views, each one byte of bound, two bytes of
 * length (little-endian) and that many bytes, copied to a buffer of
 * exactly that size (a read past the view is a read past the buffer).
 * Checks: nothing crashes or overflows (UBSan); a view the reader takes
 * formats back to the same bytes; and the sum of the views it takes has
 * each key once, with a count and an error of at least 0.
 */
#include <stdlib.h>
#include <string.h>

#include "topview.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Takes the view <v> (<len> bytes) into <m> if the reader would; checks
 * that it formats back to itself. */
static void
take(struct topk_merge *m, const char *v, size_t len, int64_t bound)
{
	struct topk_merge one = { 0 };
	int64_t           ts = topview_parse(v, len, &one);
	size_t            flen;
	char             *f;

	if (ts >= 0) {
		f = topview_format(&one, ts, &flen);
		if (flen != len || memcmp(f, v, len) != 0)
			abort();
		free(f);
		topview_add(m, &one, bound);
	}
	topk_merge_free(&one);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct topk_merge m = { 0 };

	while (size >= 3) {
		int64_t bound = data[0];
		size_t  len = (size_t)data[1] | (size_t)data[2] << 8;
		char   *v;

		data += 3;
		size -= 3;
		if (len > size)
			len = size;
		v = xmalloc(len ? len : 1);
		memcpy(v, data, len);
		take(&m, v, len, bound);
		free(v);
		data += len;
		size -= len;
	}
	topk_merge_finish(&m);
	for (int i = 0; i < m.n; i++) {
		if (m.v[i].count < 0 || m.v[i].err < 0)
			abort();
		if (i > 0 && m.v[i].count > m.v[i - 1].count)
			abort(); /* most denied first */
		for (int j = 0; j < i; j++)
			if (m.v[j].len == m.v[i].len &&
			    memcmp(m.v[j].key, m.v[i].key, m.v[i].len) == 0)
				abort();
	}
	topk_merge_free(&m);
	return 0;
}
