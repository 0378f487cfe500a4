/* store: redis URL parsing (the rest is covered against a live Redis). */
#include <criterion/criterion.h>

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
