/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address ranges for the static allow lists (cidr.h): strict parsing of
 * "addr[/len]" and matching on the 16-byte form (IPv4 mapped into IPv6).
 * Nothing here knows about messages or rules.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "cidr.h"

static const uint8_t v4_mapped[12] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
};

void
cidr_addr_v4(const uint8_t v4[4], uint8_t out[16])
{
	memcpy(out, v4_mapped, sizeof(v4_mapped));
	memcpy(out + 12, v4, 4);
}

/* Reads <s> (NUL-terminated) into <out>; 4 or 6 for the family, 0. */
static int
addr_family(const char *s, uint8_t out[16])
{
	uint8_t b[4];

	if (inet_pton(AF_INET, s, b) == 1) {
		cidr_addr_v4(b, out);
		return 4;
	}
	if (inet_pton(AF_INET6, s, out) == 1)
		return 6;
	return 0;
}

int
cidr_addr_text(const char *s, size_t len, uint8_t out[16])
{
	char buf[CIDR_TEXT_MAX];

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return addr_family(buf, out) ? 0 : -1;
}

/* A plain decimal 0..<max>: digits only, no sign, no leading zero. */
static int
parse_len(const char *s, int max, int *v)
{
	int n = 0;

	if (*s == '\0' || (s[0] == '0' && s[1] != '\0'))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		n = n * 10 + (*s - '0');
		if (n > max)
			return -1;
	}
	*v = n;
	return 0;
}

/* 1 if some bit of <a> past the first <prefix> is set. */
static bool
host_bits(const uint8_t a[16], int prefix)
{
	for (int i = 0; i < 16; i++) {
		int     keep = prefix - 8 * i;
		uint8_t mask = keep >= 8   ? 0xff
		               : keep <= 0 ? 0
		                           : (uint8_t)(0xff << (8 - keep));

		if (a[i] & ~mask)
			return true;
	}
	return false;
}

int
cidr_parse(const char *s, struct cidr *out, const char **err)
{
	char  buf[CIDR_TEXT_MAX];
	char *slash;
	int   fam, len;

	if (strlen(s) >= sizeof(buf)) {
		*err = "too long for an address range";
		return -1;
	}
	strcpy(buf, s);
	if ((slash = strchr(buf, '/')) != NULL)
		*slash = '\0';
	if ((fam = addr_family(buf, out->addr)) == 0) {
		*err = "not an IPv4 or IPv6 address (want 10.0.0.0/8, "
		       "2001:db8::/32 or a single address)";
		return -1;
	}
	len = fam == 4 ? 32 : 128;
	if (slash && parse_len(slash + 1, len, &len) == -1) {
		*err = fam == 4 ? "prefix length must be a decimal 0..32"
		                : "prefix length must be a decimal 0..128";
		return -1;
	}
	out->prefix = fam == 4 ? 96 + len : len;
	if (host_bits(out->addr, out->prefix)) {
		*err = "host bits set past the prefix length (a typo? write "
		       "the network address, or the address alone)";
		return -1;
	}
	return 0;
}

bool
cidr_match(const struct cidr *c, const uint8_t a[16])
{
	int whole = c->prefix / 8, rest = c->prefix % 8;

	assert(c->prefix >= 0 && c->prefix <= 128);
	if (memcmp(c->addr, a, (size_t)whole) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((c->addr[whole] ^ a[whole]) & (uint8_t)(0xff << (8 - rest))) ==
	       0;
}

bool
cidr_match_any(const struct cidr *v, int n, const uint8_t a[16])
{
	for (int i = 0; i < n; i++)
		if (cidr_match(&v[i], a))
			return true;
	return false;
}

void
cidr_format(const struct cidr *c, char *buf, size_t size)
{
	char text[INET6_ADDRSTRLEN];
	bool v4 = c->prefix >= 96 && memcmp(c->addr, v4_mapped, 12) == 0;

	if (v4)
		inet_ntop(AF_INET, c->addr + 12, text, sizeof(text));
	else
		inet_ntop(AF_INET6, c->addr, text, sizeof(text));
	snprintf(buf, size, "%s/%d", text, v4 ? c->prefix - 96 : c->prefix);
}
