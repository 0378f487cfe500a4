/* store: redis URL parsing (the rest is covered against a live Redis). */
#include <criterion/criterion.h>

#include "reqq.h"
#include "store.h"

Test(store, url_with_host_port_db)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://10.1.2.3:6380/2", &a), 0);
	cr_assert_str_eq(a.host, "10.1.2.3");
	cr_assert_eq(a.port, 6380);
	cr_assert_eq(a.db, 2);
	cr_assert_str_eq(a.pass, "");
}

Test(store, url_defaults_port_and_db)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://localhost", &a), 0);
	cr_assert_str_eq(a.host, "localhost");
	cr_assert_eq(a.port, 6379);
	cr_assert_eq(a.db, 0);
}

Test(store, url_with_user_and_password)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("redis://agent:s3cret@127.0.0.1:6379/0", &a), 0);
	cr_assert_str_eq(a.user, "agent");
	cr_assert_str_eq(a.pass, "s3cret");
	cr_assert_eq(store_parse_url("redis://:only@127.0.0.1", &a), 0);
	cr_assert_str_eq(a.user, "");
	cr_assert_str_eq(a.pass, "only");
}

Test(store, url_unix_socket)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("unix:/run/redis.sock", &a), 0);
	cr_assert_str_eq(a.path, "/run/redis.sock");
}

Test(store, url_rejects_garbage)
{
	struct store_addr a;

	cr_assert_eq(store_parse_url("http://x", &a), -1);
	cr_assert_eq(store_parse_url("redis://", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:0", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:99999", &a), -1);
	cr_assert_eq(store_parse_url("redis://h:12x", &a), -1);
	cr_assert_eq(store_parse_url("redis://h/abc", &a), -1);
	cr_assert_eq(store_parse_url("unix:", &a), -1);
}

/* Only an error saying Redis cannot serve feeds the circuit breaker; an
 * error about one key or one call leaves it alone. */
Test(reqq, outage_errors_are_the_ones_saying_redis_cannot_serve)
{
	cr_assert(reqq_error_is_outage("LOADING Redis is loading the dataset in memory"));
	cr_assert(reqq_error_is_outage("BUSY Redis is busy running a script."));
	cr_assert(reqq_error_is_outage("READONLY You can't write against a read only replica."));
	cr_assert(reqq_error_is_outage("OOM command not allowed when used memory > 'maxmemory'."));
	cr_assert(reqq_error_is_outage("NOAUTH Authentication required."));
	cr_assert(reqq_error_is_outage("CLUSTERDOWN The cluster is down"));
	cr_assert(reqq_error_is_outage("MASTERDOWN"));
	cr_assert_not(reqq_error_is_outage("WRONGTYPE Operation against a key holding the wrong kind of value"));
	cr_assert_not(reqq_error_is_outage("ERR Error running script"));
	cr_assert_not(reqq_error_is_outage("BUSYKEY Target key name already exists."));
	cr_assert_not(reqq_error_is_outage("OOMX not a code"));
	cr_assert_not(reqq_error_is_outage(""));
}
