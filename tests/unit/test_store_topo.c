/* SPDX-License-Identifier: Apache-2.0 */
/* store topologies: CRC16 and key slots (Redis Cluster spec vectors),
 * sentinel and cluster URL parsing. */
#include <string.h>

#include <criterion/criterion.h>

#include "crc16.h"
#include "store.h"

static unsigned
slot(const char *k)
{
	return crc16_key_slot(k, strlen(k));
}

Test(store_topo, crc16_xmodem_vectors)
{
	cr_assert_eq(crc16("123456789", 9), 0x31C3);
	cr_assert_eq(crc16("", 0), 0);
	cr_assert_eq(crc16("A", 1), 0x58E5);
}

Test(store_topo, key_slot_known_values)
{
	/* as redis-cli CLUSTER KEYSLOT answers */
	cr_assert_eq(slot("foo"), 12182);
	cr_assert_eq(slot("bar"), 5061);
	cr_assert_eq(slot("123456789"), 0x31C3 & 16383);
}

Test(store_topo, hash_tags_share_a_slot)
{
	cr_assert_eq(slot("{user1000}.following"),
	             slot("{user1000}.followers"));
	cr_assert_eq(slot("{user1000}.following"), slot("user1000"));
	cr_assert_eq(slot("rl:{tenant:acme}"), slot("rl:{tenant:acme}:12345"));
	cr_assert_eq(slot("rl:{tenant:acme}"), slot("tenant:acme"));
}

Test(store_topo, empty_tag_hashes_whole_key)
{
	cr_assert_eq(slot("foo{}{bar}"), crc16("foo{}{bar}", 10) & 16383);
	cr_assert_eq(slot("foo{"), crc16("foo{", 4) & 16383);
	cr_assert_eq(slot("foo}{"), crc16("foo}{", 5) & 16383);
}

Test(store_topo, first_brace_pair_wins)
{
	cr_assert_eq(slot("foo{{bar}}zap"), slot("{bar"));
	cr_assert_eq(slot("foo{bar}{zap}"), slot("bar"));
}

Test(store_topo, sentinel_url)
{
	struct store_topo t;

	cr_assert_eq(
		store_parse_topo_url(
			"redis+sentinel://10.0.0.1:26380,10.0.0.2,[::1]:5000/mymaster",
			&t),
		0);
	cr_assert_eq(t.kind, STORE_TOPO_SENTINEL);
	cr_assert_eq(t.nseeds, 3);
	cr_assert_str_eq(t.seeds[0].host, "10.0.0.1");
	cr_assert_eq(t.seeds[0].port, 26380);
	cr_assert_str_eq(t.seeds[1].host, "10.0.0.2");
	cr_assert_eq(t.seeds[1].port, 26379);
	cr_assert_str_eq(t.seeds[2].host, "::1");
	cr_assert_eq(t.seeds[2].port, 5000);
	cr_assert_str_eq(t.master, "mymaster");
	cr_assert_eq(t.db, 0);
}

Test(store_topo, sentinel_url_db_and_userinfo)
{
	struct store_topo t;

	cr_assert_eq(store_parse_topo_url(
			     "redis+sentinel://agent:pw@h1:1,h2:2/m1?db=3", &t),
	             0);
	cr_assert_str_eq(t.user, "agent");
	cr_assert_str_eq(t.pass, "pw");
	cr_assert_eq(t.nseeds, 2);
	cr_assert_str_eq(t.master, "m1");
	cr_assert_eq(t.db, 3);
}

Test(store_topo, topology_userinfo_is_percent_decoded)
{
	struct store_topo t;

	cr_assert_eq(store_parse_topo_url(
			     "redis+cluster://agent:p%40%2Fw@h1:1,h2:2", &t),
	             0);
	cr_assert_str_eq(t.pass, "p@/w");
	cr_assert_eq(t.nseeds, 2);
	cr_assert_str_eq(t.seeds[0].host, "h1");
	cr_assert_eq(store_parse_topo_url("redis+sentinel://:p%4@h1/m", &t),
	             -1);
}

Test(store_topo, sentinel_url_rejects)
{
	struct store_topo t;

	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:1", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:1/", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel:///m", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:1,/m", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:0/m", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:1/m?db=x", &t),
	             -1);
	cr_assert_eq(store_parse_topo_url("redis+sentinel://h1:1/m?x=1", &t),
	             -1);
	cr_assert_eq(store_parse_topo_url("redis://h1:1/m", &t), -1);
}

Test(store_topo, cluster_url)
{
	struct store_topo t;

	cr_assert_eq(
		store_parse_topo_url(
			"redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1",
			&t),
		0);
	cr_assert_eq(t.kind, STORE_TOPO_CLUSTER);
	cr_assert_eq(t.nseeds, 3);
	cr_assert_eq(t.seeds[1].port, 7001);
	cr_assert_eq(t.seeds[2].port, 6379);
	cr_assert_eq(store_parse_topo_url("redis+cluster://:pw@h:1/", &t), 0);
	cr_assert_str_eq(t.pass, "pw");
	cr_assert_eq(store_parse_topo_url("redis+cluster://h:1/0", &t), 0);
}

Test(store_topo, cluster_url_rejects)
{
	struct store_topo t;
	char              many[512] = "redis+cluster://";

	cr_assert_eq(store_parse_topo_url("redis+cluster://", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+cluster://h:1/2", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+cluster://h:1,", &t), -1);
	cr_assert_eq(store_parse_topo_url("redis+cluster://[::1:1", &t), -1);
	for (int i = 0; i < STORE_MAX_SEEDS + 1; i++)
		strcat(many, i ? ",h:1" : "h:1");
	cr_assert_eq(store_parse_topo_url(many, &t), -1);
}

Test(store_topo, plain_url_still_parses)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://[::1]:6380/1", &a), 0);
	cr_assert_str_eq(a.host, "::1");
	cr_assert_eq(a.port, 6380);
	cr_assert_eq(a.db, 1);
}
