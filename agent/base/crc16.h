/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis Cluster key slots: CRC16-CCITT (XMODEM: poly 0x1021, init 0, no
 * reflection), as the Redis Cluster specification gives it, and the hash
 * tag rule. No I/O, no allocation.
 */
#ifndef CRC16_H
#define CRC16_H

#include <stddef.h>
#include <stdint.h>

#define CRC16_SLOTS 16384

/* CRC16 XMODEM of <len> bytes at <buf>. crc16("123456789") == 0x31C3. */
uint16_t crc16(const char *buf, size_t len);

/* The cluster slot of <key>: when the key holds a '{' followed later by a
 * '}' with at least one byte between them, only the bytes between the
 * first '{' and the first '}' after it are hashed; otherwise the whole
 * key. Returns 0..16383. */
unsigned crc16_key_slot(const char *key, size_t len);

#endif
