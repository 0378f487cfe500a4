/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CRC16 for Redis Cluster slots, bit by bit. Keys are short (at most
 * POLICY_KEY_MAX bytes, the hash tag usually a few dozen), so the table a
 * byte-wise CRC would need buys nothing measurable, and the bitwise loop
 * has no shared state between worker threads.
 */
#include "crc16.h"

uint16_t
crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
			                     : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned
crc16_key_slot(const char *key, size_t len)
{
	size_t s, e;

	for (s = 0; s < len && key[s] != '{'; s++)
		;
	if (s < len) {
		for (e = s + 1; e < len && key[e] != '}'; e++)
			;
		if (e < len && e > s + 1)
			return crc16(key + s + 1, e - s - 1) &
			       (CRC16_SLOTS - 1);
	}
	return crc16(key, len) & (CRC16_SLOTS - 1);
}
