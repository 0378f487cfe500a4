/* SPDX-License-Identifier: Apache-2.0 */
/*
 * logfmt lines on stderr. One snprintf into a stack buffer and one write,
 * so lines from several workers never interleave. Values that may hold
 * spaces are quoted by the caller ("%s=\"%s\""); values a client chose
 * go through log_put_escaped() first.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

_Atomic int log_level = LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int
log_level_from_name(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void
log_put_escaped(char *buf, size_t size, size_t *off, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch > ' ' && ch < 0x7f && ch != '"' && ch != '\\') {
			if (*off + 1 >= size)
				return;
			buf[(*off)++] = (char)ch;
			continue;
		}
		if (*off + 4 >= size)
			return;
		buf[(*off)++] = '\\';
		buf[(*off)++] = 'x';
		buf[(*off)++] = hex[ch >> 4];
		buf[(*off)++] = hex[ch & 15];
	}
}

void
log_msg(int level, const char *msg, const char *fmt, ...)
{
	char            line[1024];
	struct timespec ts;
	struct tm       tm;
	size_t          n;
	va_list         ap;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
	n += snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s msg=%s",
	              ts.tv_nsec / 1000000, level_names[level], msg);
	if (fmt != NULL && n < sizeof(line) - 2) {
		line[n++] = ' ';
		va_start(ap, fmt);
		vsnprintf(line + n, sizeof(line) - n, fmt, ap);
		va_end(ap);
		n = strlen(line);
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}
