/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the admin API's decoder of request targets and its
 * JSON writer (adminreq.c), which read bytes from anyone who can reach
 * admin.listen, before the token is even checked by the caller... and
 * after. Checks: an accepted target gives NUL-terminated parameters of
 * the stated lengths inside the request's buffer, with no control byte,
 * no two with one name; the JSON of every value is valid enough that it
 * starts and ends with a quote and holds no raw control byte. The same
 * bytes as a request head: httpd_header() finds the Authorization value
 * inside them, without a line end or surrounding blanks; httpd_head_end()
 * gives the first empty line after the first line; httpd_check_head()
 * answers 0, 400, 413 or 501 with a reason, and a head it lets through
 * has no Transfer-Encoding and no Content-Length but zeros, as
 * httpd_header() reads them (what the routes would see).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adminreq.h"
#include "httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_json(const char *s, size_t n)
{
	struct jsonw w = { 0 };

	jsonw_str(&w, s, n);
	if (w.err || w.len < 2 || w.buf[0] != '"' || w.buf[w.len - 1] != '"')
		abort();
	for (size_t i = 0; i < w.len; i++)
		if ((unsigned char)w.buf[i] < 0x20)
			abort();
	free(w.buf);
}

static void
check_param(const struct adminreq *rq, const struct adminreq_param *p)
{
	const char *lo = rq->buf, *hi = rq->buf + sizeof(rq->buf);

	if (p->name < lo || p->name + p->nlen >= hi || p->value < lo ||
	    p->value + p->vlen >= hi || strlen(p->name) != p->nlen ||
	    strlen(p->value) != p->vlen || p->nlen == 0 ||
	    adminreq_get(rq, p->name) != p)
		abort();
	for (size_t i = 0; i < p->vlen; i++)
		if ((unsigned char)p->value[i] < 0x20)
			abort();
	check_json(p->value, p->vlen);
}

static void
check_head(const char *head, size_t size)
{
	const char *e = httpd_head_end(head, size), *why = NULL, *nl, *v;
	size_t      vlen;
	int         st;

	nl = memchr(head, '\n', size);
	if (e != NULL &&
	    (nl == NULL || e <= nl || e >= head + size || e[-1] != '\n' ||
	     (e[0] != '\n' &&
	      (e[0] != '\r' || e + 1 >= head + size || e[1] != '\n'))))
		abort();
	st = httpd_check_head(head, size, size % 2, &why);
	if (st != 0) {
		if ((st != 400 && st != 413 && st != 501) || why == NULL)
			abort();
		return;
	}
	if (httpd_header(head, size, "Transfer-Encoding", &vlen) != NULL)
		abort();
	v = httpd_header(head, size, "Content-Length", &vlen);
	if (v != NULL && vlen == 0)
		abort();
	for (size_t i = 0; v != NULL && i < vlen; i++)
		if (v[i] != '0')
			abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct adminreq rq;
	const char            *err = NULL;
	const char            *head = (const char *)data, *v;
	size_t                 vlen;
	int rc = adminreq_parse((const char *)data, size, &rq, &err);

	check_head(head, size);
	v = httpd_header(head, size, "Authorization", &vlen);
	if (v != NULL && (v < head || v + vlen > head + size ||
	                  memchr(v, '\n', vlen) != NULL ||
	                  (vlen > 0 && (v[0] == ' ' || v[vlen - 1] == ' '))))
		abort();

	if (rc != 0) {
		if ((rc != 400 && rc != 404) || err == NULL)
			abort();
		check_json((const char *)data, size);
		return 0;
	}
	if (rq.nparams < 0 || rq.nparams > ADMINREQ_MAX_PARAMS ||
	    (rq.route == ADMINREQ_KEYS && (rq.rule == NULL || !*rq.rule)))
		abort();
	for (int i = 0; i < rq.nparams; i++)
		check_param(&rq, &rq.params[i]);
	return 0;
}
