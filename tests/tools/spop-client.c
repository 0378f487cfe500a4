/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spop-client: plays HAProxy's side of SPOP against an agent, for the
 * integration tests. It sends a HELLO, then NOTIFYs, and prints each ACK's
 * stream-id, frame-id and variables as one line of name=value pairs, in the
 * order the ACKs arrive.
 *
 *   spop-client [-a ADDR] [-n COUNT] [-P PIPELINE] [-H] [-x HEX] [-s SID]
 *               [-I] [-M K:MESSAGE2] [-g MS] [-W] [-v] [-D CODE:TEXT] [-u] [-S]
 *               MESSAGE [NAME=TYPE:VALUE]... [+ MESSAGE
 * [NAME=TYPE:VALUE]...]...
 *
 * ADDR is host:port or unix:/path. TYPE is s (string), i (int64), 4 (IPv4),
 * 6 (IPv6), n (null; VALUE ignored). A lone + starts another message in
 * the same NOTIFY (as a spoe-group of several messages). -n sends COUNT
 * NOTIFYs, -P keeps up to PIPELINE of them in flight on the one
 * connection. -H sends a health-check
 * HELLO and prints the AGENT-HELLO. -x sends raw HEX bytes after the HELLO
 * (for malformed-input tests) and prints what comes back; -R sends them
 * instead of the HELLO. A DISCONNECT from
 * the agent prints "disconnect status=N". Every wait is bounded (-t ms).
 * -F announces another max-frame-size than HAProxy's default 16380.
 * -g MS waits MS ms before each NOTIFY after the first (a slow, steady
 * peer); -W then stays connected and prints what the agent sends until
 * -t passes with nothing (its idle DISCONNECT, say).
 * NOTIFY i (0-based) has frame-id i+1 and stream-id SID, or SID + 2i with
 * -I (distinct ids, odd like HAProxy 3.1's when SID is). -M K:MESSAGE2
 * sends MESSAGE2 instead of the first MESSAGE from the (K+1)th NOTIFY on.
 * -v prints "sent sid=S fid=F" per NOTIFY and "sent=N acked=M" at the end.
 * -u appends ".I" to every string value of NOTIFY i (a new tenant, say,
 * per NOTIFY).
 * -S shuts the write side once the last NOTIFY is sent (a half-close),
 * and goes on reading the ACKs.
 * -D CODE:TEXT ends with a HAPROXY-DISCONNECT (status-code CODE, message
 * TEXT), prints the agent's reply, then "closed" once the agent closes
 * the connection (or "open after MS ms"); exit status 0 for an
 * AGENT-DISCONNECT followed by the close.
 * A connection the agent drops before its AGENT-HELLO prints
 * "no AGENT-HELLO: eof|reset|timeout after N bytes" on stderr.
 * Exit status 0 when every NOTIFY got its ACK.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"

#include "spop.h"

#define BUF 65536

static int         timeout_ms = 2000;
static uint32_t    max_frame = 16380;
static char        rbuf[BUF];
static size_t      rlen;
static const char *rx_end = "timeout"; /* why read_frame() gave up */
static long        uniq = -1;          /* -u: the NOTIFY's index, else -1 */

static int
dial(const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t               len;
	int                     fd, one = 1;

	if (tool_resolve(addr, &ss, &len) == -1 ||
	    (fd = socket(ss.ss_family, SOCK_STREAM, 0)) == -1)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, len) == -1) {
		close(fd);
		return -1;
	}
	/* as HAProxy: each frame leaves at once, not held by Nagle until
	 * the agent acknowledges the one before (an ACK held in delay mode) */
	if (ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int
send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads until one whole frame is buffered. Returns its size, 0 on EOF or
 * timeout. */
static int
read_frame(int fd, struct spop_frame *f)
{
	int st, n;

	for (;;) {
		n = spop_decode_frame(rbuf, rlen, BUF - 4, f, &st);
		if (n > 0)
			return n;
		if (n < 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, timeout_ms) <= 0) {
			rx_end = "timeout";
			return 0;
		}
		ssize_t r = read(fd, rbuf + rlen, BUF - rlen);
		if (r <= 0) {
			rx_end = r == 0                ? "eof"
			         : errno == ECONNRESET ? "reset"
			                               : "error";
			return 0;
		}
		rlen += (size_t)r;
	}
}

static void
consume(int n)
{
	memmove(rbuf, rbuf + n, rlen - (size_t)n);
	rlen -= (size_t)n;
}

static void
print_data(const struct spop_data *d)
{
	char ip[64];

	switch (d->type) {
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		printf("%lld", (long long)d->v.i);
		break;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		printf("%llu", (unsigned long long)d->v.u);
		break;
	case SPOP_DATA_BOOL:
		printf("%s", d->v.b ? "true" : "false");
		break;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		printf("%.*s", (int)d->v.str.len, d->v.str.ptr);
		break;
	case SPOP_DATA_IPV4:
		printf("%s", inet_ntop(AF_INET, d->v.ipv4, ip, 64));
		break;
	case SPOP_DATA_IPV6:
		printf("%s", inet_ntop(AF_INET6, d->v.ipv6, ip, 64));
		break;
	default:
		printf("null");
	}
}

/* Prints one agent frame. Returns 1 for an ACK, -1 for a DISCONNECT. */
static int
print_frame(const struct spop_frame *f)
{
	struct spop_iter it = { f->payload, f->payload + f->len };
	struct spop_str  name, msg;
	struct spop_data v;
	int              act, scope, st, code;

	if (f->type == SPOP_FRM_AGENT_DISCONNECT) {
		spop_decode_disconnect(f->payload, f->len, &code, &msg, &st);
		printf("disconnect status=%d message=%.*s\n", code,
		       (int)msg.len, msg.ptr);
		return -1;
	}
	if (f->type == SPOP_FRM_AGENT_HELLO) {
		printf("hello");
		while (spop_next_kv(&it, &name, &v, &st) == 1) {
			printf(" %.*s=", (int)name.len, name.ptr);
			print_data(&v);
		}
		printf("\n");
		return 0;
	}
	printf("ack sid=%llu fid=%llu", (unsigned long long)f->stream_id,
	       (unsigned long long)f->frame_id);
	while (spop_next_action(&it, &act, &scope, &name, &v, &st) == 1) {
		printf(" %.*s=", (int)name.len, name.ptr);
		print_data(&v);
	}
	printf("\n");
	return 1;
}

static void
put_arg(struct spop_writer *w, const char *spec)
{
	const char      *eq = strchr(spec, '='), *val;
	struct spop_data d = { .type = SPOP_DATA_NULL };
	static char      ubuf[4096];

	if (eq == NULL || eq[1] == '\0' || eq[2] != ':') {
		fprintf(stderr, "bad arg '%s' (want NAME=TYPE:VALUE)\n", spec);
		exit(2);
	}
	val = eq + 3;
	spop_w_name(w, spec, (size_t)(eq - spec));
	switch (eq[1]) {
	case 's':
		d.type = SPOP_DATA_STRING;
		if (uniq >= 0) {
			snprintf(ubuf, sizeof(ubuf), "%s.%ld", val, uniq);
			val = ubuf;
		}
		d.v.str.ptr = val;
		d.v.str.len = strlen(val);
		break;
	case 'i':
		d.type = SPOP_DATA_INT64;
		d.v.i = strtoll(val, NULL, 10);
		break;
	case '4':
		d.type = SPOP_DATA_IPV4;
		inet_pton(AF_INET, val, d.v.ipv4);
		break;
	case '6':
		d.type = SPOP_DATA_IPV6;
		inet_pton(AF_INET6, val, d.v.ipv6);
		break;
	default:
		break;
	}
	spop_w_data(w, &d);
}

static int
send_hello(int fd, int healthcheck)
{
	struct spop_writer w;
	char               buf[512];
	int                n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", max_frame);
	spop_w_kv_str(&w, "capabilities", healthcheck ? "" : "pipelining,async",
	              healthcheck ? 0 : 16);
	if (healthcheck)
		spop_w_kv_bool(&w, "healthcheck", 1);
	n = spop_w_end(&w);
	return send_all(fd, buf, (size_t)n);
}

/* argv: MESSAGE [ARG]... [+ MESSAGE [ARG]...]..., one NOTIFY. */
static int
send_notify(int fd, uint64_t sid, uint64_t fid, int argc, char **argv)
{
	struct spop_writer w;
	char               buf[16384];

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, sid, fid);
	for (int m = 0, e; m < argc; m = e + 1) {
		for (e = m + 1; e < argc && strcmp(argv[e], "+") != 0; e++)
			;
		spop_w_message(&w, argv[m], e - m - 1);
		for (int i = m + 1; i < e; i++)
			put_arg(&w, argv[i]);
	}
	int n = spop_w_end(&w);
	if (n < 0)
		return -1;
	return send_all(fd, buf, (size_t)n);
}

static int
hexsend(int fd, const char *hex)
{
	char         buf[8192];
	size_t       n = 0;
	unsigned int byte;

	while (*hex != '\0' && n < sizeof(buf)) {
		if (*hex == ' ') {
			hex++;
			continue;
		}
		if (sscanf(hex, "%2x", &byte) != 1 || hex[1] == '\0')
			break;
		buf[n++] = (char)byte;
		hex += 2;
	}
	return send_all(fd, buf, n);
}

/* Sends a HAPROXY-DISCONNECT, prints the agent's answer and whether it then
 * closes. Returns 0 for an AGENT-DISCONNECT followed by the close. */
static int
disconnect(int fd, const char *spec)
{
	const char       *colon = strchr(spec, ':');
	struct spop_frame f;
	char              buf[512];
	int               n, r = 0;

	n = spop_encode_disconnect(buf, sizeof(buf),
	                           SPOP_FRM_HAPROXY_DISCONNECT, atoi(spec),
	                           colon != NULL ? colon + 1 : "");
	if (n <= 0 || send_all(fd, buf, (size_t)n) == -1)
		return 1;
	while (r >= 0 && (n = read_frame(fd, &f)) > 0) {
		r = print_frame(&f); /* an ACK still in flight may come first */
		consume(n);
	}
	if (r >= 0) {
		printf("no AGENT-DISCONNECT: %s\n", rx_end);
		return 1;
	}
	if ((n = read_frame(fd, &f)) > 0) {
		printf("frame after the DISCONNECT: type %d\n", f.type);
		return 1;
	}
	if (strcmp(rx_end, "timeout") == 0) {
		printf("open after %d ms\n", timeout_ms);
		return 1;
	}
	printf("closed\n");
	return 0;
}

static void
summary(int verbose, long sent, long acked)
{
	if (verbose)
		printf("sent=%ld acked=%ld\n", sent, acked);
}

int
main(int argc, char **argv)
{
	const char *addr = "127.0.0.1:12345", *hex = NULL, *discon = NULL;
	const char *msg2 = NULL;
	long        count = 1, pipeline = 1, sent = 0, acked = 0, first = 0;
	uint64_t    sid = 1, s_id;
	int         ch, health = 0, raw_first = 0, linger = 0, halfclose = 0,
		gap_ms = 0, fd, n, r;
	int               sid_step = 0, verbose = 0;
	struct spop_frame f;

	setvbuf(stdout, NULL, _IOLBF, 0); /* tests watch it while we run */
	signal(SIGPIPE, SIG_IGN);         /* a closed peer is a result */
	while ((ch = getopt(argc, argv, "a:n:P:Hx:Rs:t:F:g:WIM:vD:uS")) != -1) {
		switch (ch) {
		case 'a':
			addr = optarg;
			break;
		case 'n':
			count = atol(optarg);
			break;
		case 'P':
			pipeline = atol(optarg);
			break;
		case 'H':
			health = 1;
			break;
		case 'x':
			hex = optarg;
			break;
		case 'R':
			raw_first = 1;
			break;
		case 's':
			sid = strtoull(optarg, NULL, 10);
			break;
		case 't':
			timeout_ms = atoi(optarg);
			break;
		case 'F':
			max_frame = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'g':
			gap_ms = atoi(optarg);
			break;
		case 'W':
			linger = 1;
			break;
		case 'I':
			sid_step = 2;
			break;
		case 'M':
			first = atol(optarg);
			msg2 = strchr(optarg, ':');
			if (msg2 == NULL || *++msg2 == '\0')
				return 2;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'D':
			discon = optarg;
			break;
		case 'u':
			uniq = 0;
			break;
		case 'S':
			halfclose = 1;
			break;
		default:
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if ((fd = dial(addr)) == -1) {
		fprintf(stderr, "connect %s: %s\n", addr, strerror(errno));
		return 1;
	}
	if (raw_first && hex != NULL) {
		hexsend(fd, hex);
		while ((n = read_frame(fd, &f)) > 0 && print_frame(&f) >= 0)
			consume(n);
		return 0;
	}
	n = 0;
	if (send_hello(fd, health) == -1)
		rx_end = errno == EPIPE || errno == ECONNRESET ? "reset"
		                                               : "error";
	else
		n = read_frame(fd, &f);
	if (n == 0) {
		fprintf(stderr, "no AGENT-HELLO: %s after %zu bytes\n", rx_end,
		        rlen);
		return 1;
	}
	r = print_frame(&f);
	consume(n);
	if (r < 0 || health)
		return r < 0;
	if (hex != NULL) {
		hexsend(fd, hex);
		while ((n = read_frame(fd, &f)) > 0) {
			r = print_frame(&f);
			consume(n);
			if (r < 0)
				break;
		}
		return 0;
	}
	if (argc < 1)
		return discon != NULL ? disconnect(fd, discon) : 0;
	while (acked < count) {
		while (sent < count && sent - acked < pipeline) {
			if (gap_ms > 0 && sent > 0)
				poll(NULL, 0, gap_ms);
			if (msg2 != NULL && sent == first)
				argv[0] = (char *)msg2;
			s_id = sid + (uint64_t)(sid_step * sent);
			if (uniq >= 0)
				uniq = sent;
			if (send_notify(fd, s_id, (uint64_t)sent + 1, argc,
			                argv) == -1) {
				summary(verbose, sent, acked);
				return 1;
			}
			sent++;
			if (verbose)
				printf("sent sid=%llu fid=%ld\n",
				       (unsigned long long)s_id, sent);
			if (halfclose && sent == count)
				shutdown(fd, SHUT_WR);
		}
		if ((n = read_frame(fd, &f)) == 0) {
			fprintf(stderr, "%s: %ld of %ld ACKs\n", rx_end, acked,
			        count);
			summary(verbose, sent, acked);
			return 1;
		}
		r = print_frame(&f);
		consume(n);
		if (r < 0) {
			summary(verbose, sent, acked);
			return 1;
		}
		acked += r;
	}
	summary(verbose, sent, acked);
	if (discon != NULL)
		return disconnect(fd, discon);
	while (linger && (n = read_frame(fd, &f)) > 0) {
		r = print_frame(&f);
		consume(n);
		if (r < 0)
			break;
	}
	fflush(stdout);
	return 0;
}
