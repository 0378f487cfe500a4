/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the /metrics and /healthz responder's request line
 * parser, which reads bytes from any client that can reach the metrics
 * port. Checks that accepted lines give slices inside the input, a method
 * of upper-case letters and a path starting with '/' without '?'.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *line = (const char *)data, *meth, *path;
	size_t      mlen, plen;

	if (httpd_parse_request_line(line, size, &meth, &mlen, &path, &plen) !=
	    0)
		return 0;
	if (meth != line || mlen == 0 || mlen > 16 || path < line ||
	    path + plen > line + size || plen == 0 || path[0] != '/' ||
	    memchr(path, '?', plen) != NULL)
		abort();
	for (size_t i = 0; i < mlen; i++)
		if (meth[i] < 'A' || meth[i] > 'Z')
			abort();
	return 0;
}
