/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metrics/health HTTP responder (see httpd.h for what it answers).
 *
 * What it does: one non-blocking listener and up to HTTPD_MAX_CONNS
 * connections on one libev loop. A connection reads its request head into
 * a fixed HTTPD_MAX_HEAD buffer, is answered from a single malloc'ed
 * response (head and body), written as the socket accepts it, then
 * closed once the peer has closed too (what it still sends is dropped: a
 * close with input unread would reset the response away). One ev_timer
 * per connection bounds the whole exchange; it is not re-armed on
 * activity, so trickling bytes does not extend it.
 *
 * The head ends at its first empty line, CRLF or bare LF. Its header lines
 * are checked for syntax and framing only (httpd_check_head(): a request
 * with a body, a Transfer-Encoding or a bad Content-Length is refused with
 * 400, 413 or 501 before any route runs); what follows the head, a body
 * or a pipelined request, is dropped unread with the rest of the input.
 *
 * What it does not do: keep-alive, pipelining, request bodies, transfer
 * codings, absolute-form targets, TLS. It is an exporter endpoint, not a
 * web server.
 *
 * Reentrancy: single-threaded; everything runs on the loop given to
 * httpd_new(). A connection is freed from its own callback, which libev
 * allows once its watchers are stopped and nothing touches them after.
 * When the connection table is full, a new connection takes the slot of
 * the oldest one still reading its request: clients that connect and send
 * nothing (a slowloris) cannot keep a health check out, as it only has to
 * outlast HTTPD_MAX_CONNS newer connections, and a callback accepts at
 * most HTTPD_ACCEPT_BATCH of them before the loop reads requests again.
 * When every slot is writing a response, or accept(2) runs out of
 * descriptors, the listener is paused (a timer resumes it after EMFILE),
 * so a burst cannot spin the loop.
 */
#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "httpd.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define HTTPD_RETRY_S      1.0 /* accepting again after EMFILE and friends */
#define HTTPD_ACCEPT_BATCH 8   /* accepts per callback: requests get read */
#define HTTPD_LINGER_MAX   (64 * 1024) /* bytes dropped after the response */

struct hconn {
	ev_io         io;    /* EV_READ, then EV_WRITE */
	ev_timer      timer; /* deadline of the whole exchange */
	struct httpd *h;
	int           fd;
	int           slot;  /* index in h->conns */
	ev_tstamp     since; /* accepted */
	size_t        inlen;
	char          in[HTTPD_MAX_HEAD];
	char         *out;   /* response; NULL while reading */
	const char   *allow; /* a 405's Allow; NULL: GET, HEAD */
	size_t        outlen;
	size_t        outoff;
	int           lingering; /* response out: reading to the peer's EOF */
	size_t        discarded; /* bytes dropped meanwhile */
};

struct httpd {
	struct ev_loop *loop;
	int             fd;
	int             port;
	ev_io           accept_io;
	ev_timer        retry; /* resumes accepting after EMFILE */
	int (*healthy)(void *);
	void          *arg;
	double         timeout;
	int            nconns;
	struct hconn  *conns[HTTPD_MAX_CONNS];
	const char    *prefix; /* httpd_set_handler() */
	httpd_handler *handler;
	void          *harg;
};

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents);
static void io_cb(struct ev_loop *loop, ev_io *w, int revents);

/* ---- listener ----------------------------------------------------------- */

static char *errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
errf(const char *fmt, ...)
{
	char    buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return xstrdup(buf);
}

/* The debug line of a request: method and path come from the client,
 * so they are escaped (a newline in them would forge a log line); a path
 * cut at 200 bytes says so. The method is whole (16 bytes at most). */
static void
log_request(const struct hconn *c, const char *meth, size_t mlen,
            const char *path, size_t plen)
{
	char m[4 * 16 + 1], p[4 * 200 + 1];
	int  cut;

	cut = log_escape_value(m, sizeof(m), meth, mlen, 16);
	assert(!cut); /* the parser's methods are 16 bytes at most */
	cut = log_escape_value(p, sizeof(p), path, plen, 200);
	log_debug("httpd_request", "method=%s path=\"%s\" status=%.3s%s", m, p,
	          c->out + 9, LOG_CUT(cut));
}

/* Splits "host:port", "[v6]:port" or ":port" into <host> and <port>
 * (both NUL-terminated, sized by the caller). Returns 0 or -1. */
static int
split_addr(const char *addr, char *host, size_t hsize, char *port, size_t psize)
{
	const char *colon, *h = addr, *hend;
	size_t      n;

	if (addr[0] == '[') {
		h = addr + 1;
		hend = strchr(h, ']');
		if (hend == NULL || hend[1] != ':')
			return -1;
		colon = hend + 1;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL || memchr(addr, ':', (size_t)(colon - addr)))
			return -1; /* bare IPv6 needs brackets */
		hend = colon;
	}
	n = (size_t)(hend - h);
	if (n >= hsize || strlen(colon + 1) >= psize || colon[1] == '\0')
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	if (n == 0)
		snprintf(host, hsize, "0.0.0.0");
	snprintf(port, psize, "%s", colon + 1);
	if (strspn(port, "0123456789") != strlen(port) || atoi(port) > 65535)
		return -1;
	return 0;
}

/* Binds and listens on the first address of <host,port> that works.
 * Returns the fd, or -1 with <*err>. */
static int
open_listener(const char *addr, const char *host, const char *port, char **err)
{
	struct addrinfo hints, *res, *ai;
	int             fd = -1, one = 1, rc, saved = 0;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		*err = errf("httpd: %s: %s", addr, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
		            ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		            ai->ai_protocol);
		if (fd == -1) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, HTTPD_MAX_CONNS) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1)
		*err = errf("httpd: listen %s: %s", addr, strerror(saved));
	return fd;
}

static int
bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t               len = sizeof(ss);
	char                    port[16];

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1 ||
	    getnameinfo((struct sockaddr *)&ss, len, NULL, 0, port,
	                sizeof(port), NI_NUMERICSERV) != 0)
		return -1;
	return atoi(port);
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct httpd *h = container_of(w, struct httpd, retry);

	ev_io_start(loop, &h->accept_io); /* accept_cb stops it if full */
}

struct httpd *
httpd_new(struct ev_loop *loop, const char *addr, int (*healthy)(void *),
          void *arg, char **err)
{
	struct httpd *h;
	char          host[256], port[16];
	int           fd;

	if (split_addr(addr, host, sizeof(host), port, sizeof(port)) == -1) {
		*err = errf("httpd: bad address '%s' (want host:port)", addr);
		return NULL;
	}
	fd = open_listener(addr, host, port, err);
	if (fd == -1)
		return NULL;
	h = xcalloc(1, sizeof(*h));
	h->loop = loop;
	h->fd = fd;
	h->port = bound_port(fd);
	h->healthy = healthy;
	h->arg = arg;
	h->timeout = HTTPD_TIMEOUT;
	ev_io_init(&h->accept_io, accept_cb, fd, EV_READ);
	ev_timer_init(&h->retry, retry_cb, HTTPD_RETRY_S, 0.0);
	ev_io_start(loop, &h->accept_io);
	log_info("httpd_listening", "addr=%s port=%d", addr, h->port);
	return h;
}

int
httpd_port(const struct httpd *h)
{
	return h->port;
}

void
httpd_set_timeout(struct httpd *h, double seconds)
{
	if (seconds > 0)
		h->timeout = seconds;
}

/* ---- connections -------------------------------------------------------- */

static void
conn_close(struct hconn *c)
{
	struct httpd *h = c->h;

	ev_io_stop(h->loop, &c->io);
	ev_timer_stop(h->loop, &c->timer);
	close(c->fd);
	free(c->out);
	h->nconns--;
	h->conns[c->slot] = h->conns[h->nconns];
	h->conns[c->slot]->slot = c->slot;
	h->conns[h->nconns] = NULL;
	free(c);
	if (!ev_is_active(&h->retry))
		ev_io_start(h->loop, &h->accept_io);
}

static void
timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct hconn *c = container_of(w, struct hconn, timer);

	log_debug("httpd_timeout", "fd=%d bytes=%zu", c->fd, c->inlen);
	conn_close(c);
}

/* The oldest connection still reading its request, or NULL. */
static struct hconn *
oldest_reader(const struct httpd *h)
{
	struct hconn *old = NULL;

	for (int i = 0; i < h->nconns; i++)
		if (h->conns[i]->out == NULL &&
		    (old == NULL || h->conns[i]->since < old->since))
			old = h->conns[i];
	return old;
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct httpd *h = container_of(w, struct httpd, accept_io);
	struct hconn *c;
	int           fd;

	for (int n = 0; n < HTTPD_ACCEPT_BATCH; n++) {
		if (h->nconns == HTTPD_MAX_CONNS && oldest_reader(h) == NULL) {
			/* every slot writing: the kernel backlog holds the
			 * rest until one frees (conn_close) */
			ev_io_stop(loop, &h->accept_io);
			return;
		}
		fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			/* EMFILE and friends: the socket stays readable, so
			 * stop watching it for a while instead of spinning. */
			log_warn("httpd_accept_failed", "error=\"%s\"",
			         strerror(errno));
			ev_io_stop(loop, &h->accept_io);
			/* set again: once fired, a one-shot timer's delay
			 * is spent, and it would fire at once (a spin) */
			ev_timer_set(&h->retry, HTTPD_RETRY_S, 0.0);
			ev_timer_start(loop, &h->retry);
			return;
		}
		if (h->nconns == HTTPD_MAX_CONNS) {
			struct hconn *old = oldest_reader(h);

			log_debug("httpd_evicted", "fd=%d bytes=%zu", old->fd,
			          old->inlen);
			conn_close(old);
		}
		c = xcalloc(1, sizeof(*c));
		c->h = h;
		c->fd = fd;
		c->since = ev_now(loop);
		c->slot = h->nconns;
		h->conns[h->nconns++] = c;
		ev_io_init(&c->io, io_cb, fd, EV_READ);
		ev_timer_init(&c->timer, timeout_cb, h->timeout, 0.0);
		ev_io_start(loop, &c->io);
		ev_timer_start(loop, &c->timer);
	}
	/* more may wait: the next loop turn, after the requests are read */
}

/* ---- requests ----------------------------------------------------------- */

static const char *
reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 405:
		return "Method Not Allowed";
	case 413:
		return "Content Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	default:
		return "Service Unavailable";
	}
}

/* Builds the response into c->out; <body> is copied unless <head_only>. */
static void
respond(struct hconn *c, int status, const char *ctype, const char *body,
        size_t blen, int head_only)
{
	char head[512], allow[64];
	int  n;

	snprintf(allow, sizeof(allow), "Allow: %s\r\n",
	         c->allow ? c->allow : "GET, HEAD");
	n = snprintf(head, sizeof(head),
	             "HTTP/1.1 %d %s\r\n"
	             "Content-Type: %s\r\nContent-Length: %zu\r\n"
	             "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
	             status, reason(status), ctype, blen,
	             status == 405   ? allow
	             : status == 401 ? "WWW-Authenticate: Bearer\r\n"
	                             : "");
	if (head_only)
		blen = 0;
	c->out = xmalloc((size_t)n + blen);
	memcpy(c->out, head, (size_t)n);
	memcpy(c->out + n, body, blen);
	c->outlen = (size_t)n + blen;
	c->outoff = 0;
}

static void
respond_text(struct hconn *c, int status, const char *text, int head_only)
{
	respond(c, status, "text/plain; charset=utf-8", text, strlen(text),
	        head_only);
}

int
httpd_parse_request_line(const char *line, size_t len, const char **meth,
                         size_t *mlen, const char **path, size_t *plen)
{
	const char *sp1, *sp2, *end = line + len, *q;

	sp1 = memchr(line, ' ', len);
	if (sp1 == NULL || sp1 == line || sp1 - line > 16)
		return -1;
	for (const char *p = line; p < sp1; p++)
		if (*p < 'A' || *p > 'Z')
			return -1;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1));
	if (sp2 == NULL || sp1[1] != '/')
		return -1;
	for (const char *p = sp1 + 1; p < sp2; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return -1;
	if ((size_t)(end - sp2 - 1) != 8 ||
	    (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 &&
	     memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
		return -1;
	*meth = line;
	*mlen = (size_t)(sp1 - line);
	*path = sp1 + 1;
	q = memchr(*path, '?', (size_t)(sp2 - *path));
	*plen = (size_t)((q != NULL ? q : sp2) - *path);
	return 0;
}

static int
is(const char *s, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

const char *
httpd_head_end(const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len, *nl;

	while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		if (p != buf && (nl == p || (nl == p + 1 && *p == '\r')))
			return p;
		p = nl + 1;
	}
	return NULL;
}

/* A tchar of RFC 9110 5.6.2: what a field name is made of. */
static int
tchar(unsigned char ch)
{
	return ch > ' ' && ch < 0x7f &&
	       strchr("\"(),/:;<=>?@[\\]{}", ch) == NULL;
}

/* The framing headers of a head, as httpd_check_head() reads them. */
struct framing {
	int      ncl, nte; /* Content-Length, Transfer-Encoding lines */
	int      badcl;    /* a Content-Length that is not 1*DIGIT < 2^64 */
	uint64_t cl;
};

/* The Content-Length value <v,n> (blanks trimmed) into <f>. */
static void
content_length(struct framing *f, const char *v, size_t n)
{
	f->ncl++;
	f->badcl |= n == 0;
	for (size_t i = 0; i < n && !f->badcl; i++) {
		unsigned d = (unsigned)(unsigned char)v[i] - '0';

		if (d > 9 || f->cl > (UINT64_MAX - d) / 10)
			f->badcl = 1;
		else
			f->cl = f->cl * 10 + d;
	}
}

/* One header line <p,n> (its line end dropped) into <f>. Returns 0, or
 * -1 when it is no "token:value" line or holds a CR or a NUL. */
static int
header_line(struct framing *f, const char *p, size_t n)
{
	const char *colon = memchr(p, ':', n), *v, *e = p + n;

	if (colon == NULL || colon == p || memchr(p, '\r', n) != NULL ||
	    memchr(p, '\0', n) != NULL)
		return -1;
	for (const char *q = p; q < colon; q++)
		if (!tchar((unsigned char)*q))
			return -1; /* a blank before the colon, an obs-fold */
	for (v = colon + 1; v < e && (*v == ' ' || *v == '\t'); v++)
		;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (colon - p == 14 && strncasecmp(p, "Content-Length", 14) == 0)
		content_length(f, v, (size_t)(e - v));
	else if (colon - p == 17 &&
	         strncasecmp(p, "Transfer-Encoding", 17) == 0)
		f->nte++;
	return 0;
}

int
httpd_check_head(const char *head, size_t len, int http10, const char **why)
{
	struct framing f = { 0 };
	const char    *p = head, *end = head + len, *eol;
	size_t         n;

	for (; p < end; p = eol + 1) {
		eol = memchr(p, '\n', (size_t)(end - p));
		if (eol == NULL)
			eol = end;
		n = (size_t)(eol - p);
		if (n > 0 && p[n - 1] == '\r')
			n--;
		if (header_line(&f, p, n) == -1) {
			*why = "malformed header line\n";
			return 400;
		}
	}
	if (f.nte > 0 && (f.ncl > 0 || http10)) {
		*why = "Transfer-Encoding with Content-Length or in HTTP/1.0\n";
		return 400;
	}
	if (f.nte > 0) {
		*why = "Transfer-Encoding is not supported\n";
		return 501;
	}
	if (f.ncl > 1 || f.badcl) {
		*why = "bad or repeated Content-Length\n";
		return 400;
	}
	if (f.cl > 0) {
		*why = "request bodies are not accepted\n";
		return 413;
	}
	return 0;
}

void
httpd_set_handler(struct httpd *h, const char *prefix, httpd_handler *fn,
                  void *arg)
{
	h->prefix = prefix;
	h->handler = fn;
	h->harg = arg;
}

const char *
httpd_header(const char *head, size_t len, const char *name, size_t *vlen)
{
	size_t      nl = strlen(name);
	const char *p = head, *end = head + len, *eol, *v;

	for (; p < end; p = eol + 1) {
		eol = memchr(p, '\n', (size_t)(end - p));
		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - p) <= nl || p[nl] != ':' ||
		    strncasecmp(p, name, nl) != 0)
			continue;
		v = p + nl + 1;
		while (v < eol && (*v == ' ' || *v == '\t'))
			v++;
		*vlen = (size_t)(eol - v);
		while (*vlen > 0 &&
		       (v[*vlen - 1] == '\r' || v[*vlen - 1] == ' ' ||
		        v[*vlen - 1] == '\t'))
			(*vlen)--;
		return v;
	}
	return NULL;
}

/* Hands a request under the handler's prefix to it. */
static void
route_handler(struct hconn *c, const char *meth, size_t mlen, const char *path,
              const char *hend)
{
	struct httpd_req rq = { .meth = meth, .mlen = mlen, .target = path };
	const char      *ctype = "application/json";
	char            *body = NULL;
	size_t           blen = 0;
	int              status;

	rq.tlen = (size_t)((const char *)memchr(path, ' ',
	                                        (size_t)(hend - path)) -
	                   path);
	rq.head = (const char *)memchr(path, '\n', (size_t)(hend - path)) + 1;
	rq.hlen = (size_t)(hend - rq.head);
	status = c->h->handler(c->h->harg, &rq, &body, &blen, &ctype);
	c->allow = "GET, DELETE";
	/* a HEAD has the GET's head and no body (RFC 9110 9.3.2) */
	respond(c, status, ctype, body ? body : "", blen,
	        is(meth, mlen, "HEAD"));
	free(body);
}

/* Routes a complete, valid request line. */
static void
route(struct hconn *c, const char *meth, size_t mlen, const char *path,
      size_t plen, const char *hend)
{
	int    head = is(meth, mlen, "HEAD");
	int    known = is(path, plen, "/metrics") || is(path, plen, "/healthz");
	char  *text;
	size_t len;

	if (c->h->handler != NULL && plen >= strlen(c->h->prefix) &&
	    memcmp(path, c->h->prefix, strlen(c->h->prefix)) == 0) {
		route_handler(c, meth, mlen, path, hend);
		return;
	}
	if (!known) {
		respond_text(c, 404, "not found: try /metrics or /healthz\n",
		             head);
	} else if (!head && !is(meth, mlen, "GET")) {
		respond_text(c, 405, "method not allowed\n", 0);
	} else if (is(path, plen, "/healthz")) {
		if (c->h->healthy == NULL || c->h->healthy(c->h->arg))
			respond_text(c, 200, "ok\n", head);
		else
			respond_text(c, 503, "unhealthy\n", head);
	} else {
		text = metrics_render_alloc(&len);
		respond(c, 200, "text/plain; version=0.0.4; charset=utf-8",
		        text, len, head);
		free(text);
	}
}

/* Looks at what was read so far; builds a response once there is one to
 * give. Returns 1 when c->out is ready, 0 to keep reading. */
static int
examine(struct hconn *c)
{
	const char *nl, *meth, *path, *hend, *why;
	size_t      mlen, plen, llen;
	int         status;

	nl = memchr(c->in, '\n', c->inlen);
	if (nl == NULL) {
		if (c->inlen < HTTPD_MAX_HEAD)
			return 0;
		respond_text(c, 400, "request line too long\n", 0);
		return 1;
	}
	llen = (size_t)(nl - c->in);
	if (llen > 0 && c->in[llen - 1] == '\r')
		llen--;
	/* A bad request line is refused at once, before its headers. */
	if (httpd_parse_request_line(c->in, llen, &meth, &mlen, &path, &plen) ==
	    -1) {
		respond_text(c, 400, "bad request\n", 0);
		return 1;
	}
	/* Wait for the end of the head so closing does not reset it. */
	/* hend: past the last header line's end */
	hend = httpd_head_end(c->in, c->inlen);
	if (hend == NULL) {
		if (c->inlen < HTTPD_MAX_HEAD)
			return 0;
		respond_text(c, 400, "request head too large\n", 0);
		return 1;
	}
	/* the request line ends in "HTTP/1.0" or "HTTP/1.1" */
	assert(llen >= 8);
	status = httpd_check_head(nl + 1, (size_t)(hend - nl - 1),
	                          c->in[llen - 1] == '0', &why);
	if (status != 0)
		respond_text(c, status, why, is(meth, mlen, "HEAD"));
	else
		route(c, meth, mlen, path, plen, hend);
	if (log_level >= LOG_DEBUG)
		log_request(c, meth, mlen, path, plen);
	return 1;
}

/* After the response: drops what the peer sends, closes at its EOF. */
static void
linger_read(struct hconn *c)
{
	if (util_drain(c->fd, &c->discarded, HTTPD_LINGER_MAX))
		conn_close(c);
}

/* Writes what the socket takes; once all is out, lingers (linger_read). */
static void
flush(struct hconn *c)
{
	ssize_t n;

	while (c->outoff < c->outlen) {
		n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
		         MSG_NOSIGNAL);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n == -1) {
			conn_close(c);
			return;
		}
		c->outoff += (size_t)n;
	}
	/* Closing with input unread (a body, a second request) would send
	 * a reset, and a reset destroys what of the response the peer has
	 * not read yet: shut our side, drop what still comes, and close at
	 * the peer's EOF (or past HTTPD_LINGER_MAX bytes, or at the
	 * exchange's deadline). Evictable meanwhile, as a reader is. */
	if (shutdown(c->fd, SHUT_WR) == -1) {
		conn_close(c);
		return;
	}
	free(c->out);
	c->out = NULL;
	c->lingering = 1;
	ev_io_stop(c->h->loop, &c->io);
	ev_io_set(&c->io, c->fd, EV_READ);
	ev_io_start(c->h->loop, &c->io);
	linger_read(c);
}

static void
io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct hconn *c = container_of(w, struct hconn, io);
	ssize_t       n;

	if (c->lingering) {
		linger_read(c);
		return;
	}
	if (c->out != NULL) {
		flush(c);
		return;
	}
	n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, 0);
	if (n == -1 &&
	    (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c); /* peer gone before asking */
		return;
	}
	c->inlen += (size_t)n;
	if (!examine(c))
		return;
	ev_io_stop(loop, &c->io);
	ev_io_set(&c->io, c->fd, EV_WRITE);
	ev_io_start(loop, &c->io);
	flush(c);
}

void
httpd_free(struct httpd *h)
{
	if (h == NULL)
		return;
	while (h->nconns > 0)
		conn_close(h->conns[h->nconns - 1]);
	ev_io_stop(h->loop, &h->accept_io);
	ev_timer_stop(h->loop, &h->retry);
	close(h->fd);
	free(h);
}
