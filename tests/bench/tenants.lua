-- SPDX-License-Identifier: Apache-2.0
-- wrk script for tests/bench/run.sh.
--   BENCH_TENANT set:   every request carries X-Tenant: $BENCH_TENANT (flood)
--   otherwise:          X-Tenant: tNNNN, random over BENCH_TENANTS (10000),
--                       requests prebuilt per thread (cheap for wrk)
--   BENCH_DELAY_MS > 0: each connection waits that long after a response
--                       before its next request (paced load, no -R in wrk)
local fixed = os.getenv("BENCH_TENANT")
local n = tonumber(os.getenv("BENCH_TENANTS") or "10000")
local d = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local nthreads = 0

function setup(thread)
	nthreads = nthreads + 1
	thread:set("tid", nthreads)
end

if fixed and fixed ~= "" then
	wrk.headers["X-Tenant"] = fixed
else
	local reqs = {}
	function init(args)
		math.randomseed(os.time() * 7919 + (tid or 0) * 104729)
		for i = 0, n - 1 do
			reqs[i + 1] = wrk.format("GET", "/", { ["X-Tenant"] = string.format("t%04d", i) })
		end
	end
	function request()
		return reqs[math.random(n)]
	end
end

if d > 0 then
	function delay()
		return d
	end
end
