/* SPDX-License-Identifier: Apache-2.0 */
/*
 * logfmt lines on stderr. One snprintf into a stack buffer and one write,
 * so lines from several workers never interleave. Values that may hold
 * spaces are quoted by the caller ("%s=\"%s\""); values a client chose
 * go through log_put_escaped() first.
 */
#include <assert.h>
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

/* log_put_escaped(), with spaces kept when <space> (a quoted text). */
static size_t
put_escaped(char *buf, size_t size, size_t *off, const char *s, size_t len,
            int space)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if ((ch > ' ' || (space && ch == ' ')) && ch < 0x7f &&
		    ch != '"' && ch != '\\') {
			if (*off + 1 >= size)
				return i;
			buf[(*off)++] = (char)ch;
			continue;
		}
		if (*off + 4 >= size)
			return i;
		buf[(*off)++] = '\\';
		buf[(*off)++] = 'x';
		buf[(*off)++] = hex[ch >> 4];
		buf[(*off)++] = hex[ch & 15];
	}
	return len;
}

size_t
log_put_escaped(char *buf, size_t size, size_t *off, const char *s, size_t len)
{
	return put_escaped(buf, size, off, s, len, 0);
}

const char *
log_text(struct log_text *t, const char *s)
{
	size_t off = 0, len = strlen(s);
	size_t n = len < LOG_TEXT_MAX ? len : LOG_TEXT_MAX;

	n = put_escaped(t->s, sizeof t->s, &off, s, n, 1);
	t->s[off] = '\0';
	t->cut = n < len;
	return t->s;
}

int
log_escape_value(char *buf, size_t size, const char *s, size_t len, size_t max)
{
	size_t off = 0, n = len < max ? len : max;

	assert(size > 0);
	n = log_put_escaped(buf, size, &off, s, n);
	buf[off] = '\0';
	return n < len;
}

/* Ends the line <line> cut at <n>: drops a \xHH escape the cut split,
 * closes a quoted value it left open (values are escaped, so a quote in
 * the line is a delimiter) and appends LOG_CUT_MARK. Needs 1 +
 * strlen(LOG_CUT_MARK) bytes after <n>. Returns the new length. */
static size_t
log_cut(char *line, size_t n)
{
	int quotes = 0;

	for (size_t j = n > 3 ? n - 3 : 0; j < n; j++)
		if (line[j] == '\\') {
			n = j;
			break;
		}
	for (size_t j = 0; j < n; j++)
		quotes += line[j] == '"';
	if (quotes % 2)
		line[n++] = '"';
	memcpy(line + n, LOG_CUT_MARK, sizeof(LOG_CUT_MARK) - 1);
	return n + sizeof(LOG_CUT_MARK) - 1;
}

/* The line's length <n> after a printf at <n> into <max> gave <k>: at
 * most <max> - 1, with <*cut> set when the text did not fit. */
static size_t
advance(size_t n, int k, size_t max, int *cut)
{
	if (k < 0)
		k = 0;
	if ((size_t)k >= max - n) {
		*cut = 1;
		return max - 1;
	}
	return n + (size_t)k;
}

void
log_msg(int level, const char *msg, const char *fmt, ...)
{
	/* the text, then room for a closing quote, the mark and '\n' */
	enum { ROOM = 1 + sizeof(LOG_CUT_MARK) - 1 + 1 };
	char            line[1024 + ROOM];
	const size_t    max = sizeof(line) - ROOM;
	struct timespec ts;
	struct tm       tm;
	size_t          n;
	int             k, cut = 0;
	va_list         ap;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, max, "ts=%Y-%m-%dT%H:%M:%S", &tm);
	k = snprintf(line + n, max - n, ".%03ldZ level=%s msg=%s",
	             ts.tv_nsec / 1000000, level_names[level], msg);
	n = advance(n, k, max, &cut);
	if (fmt != NULL && !cut && n < max - 1) {
		line[n++] = ' ';
		va_start(ap, fmt);
		k = vsnprintf(line + n, max - n, fmt, ap);
		va_end(ap);
		n = advance(n, k, max, &cut);
	}
	if (cut)
		n = log_cut(line, n);
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}
