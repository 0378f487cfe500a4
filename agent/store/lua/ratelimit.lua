-- SPDX-License-Identifier: Apache-2.0
-- spoa-ratelimit: the one Redis script. The contract (KEYS, ARGV, reply)
-- is in agent/limiter/limiter.h; the maths in agent/limiter/lim_*.c, which are its C twins
-- and must stay decision-for-decision identical (tests/integration).
--
-- Redis 7 runs Lua 5.1: numbers are doubles, so every value kept here is an
-- integer below 2^53 (checked by lim_params_init on the agent side) and
-- every product that could pass 2^53 goes through muldiv(). Time is Redis
-- TIME in µs. Each request is two-phase: evaluate all its checks (reads
-- only), then write all of them only if no non-shadow CHECK denied.

-- Globals, read into the locals below by the first call: a global is a
-- table lookup on every use, and a FUNCTION library being loaded sees no
-- global but redis.register_function. (Defined before the locals, so that
-- the names here are the globals.)
local function globals()
	return redis.call, tonumber, math.floor, math.min, math.max,
		string.format, unpack, cmsgpack.unpack, cmsgpack.pack, string.byte,
		string.rep
end
local call, tonumber, floor, min, max, format, unpack, mp_unpack, mp_pack,
	byte, rep

local CHECK, FORCE, RELEASE, PEEK = 0, 1, 2, 3
local GCRA, TB, LEAKY, FW, SW, LOG, CONC = 0, 1, 2, 3, 4, 5, 6
local COST_MAX = 4294967296
local TWO53 = 9007199254740992
local MICRO = 1000000
local DAY = 86400000000
local MARGIN_MS = 1000

-- One call's state. Every function below is made once per chunk run:
-- once per call under EVAL, once per FUNCTION LOAD under FCALL (the
-- last line of this file says which); batch() sets these on each call.
-- (committed: the keys a token bucket charge wrote in this call, made on
-- the first; a table made once would grow for the library's life.)
local KEY, ARG, now, out, o, val_, seen_, committed
-- VIEW: ARGV[2] is "view" (limiter.h): an operator's PEEK, which writes
-- nothing, not even what a PEEK of the agents keeps up to date
local VIEW
-- seenei_: the interval of each TAT in seen_, in a call whose GCRA / leaky
-- bucket rules are of several (nil in the others: every TAT is at its
-- key's one)
local seenei_

-- Integers as decimal strings. '%d' formats a C long (exact below 2^53
-- here); '%.0f' and passing numbers to redis.call (%.17g) go through the
-- slow float printer.
local function s(n) return format('%d', n) end

-- floor(a / b) for 0 <= a < 2^53, b > 0, corrected for double rounding.
local function idiv(a, b)
	local q = floor(a / b)
	if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
	return q
end

local function ceil_ms(us) return idiv(us + 999, 1000) end

-- Exact floor(a * b / c) and remainder, for a, b, c < 2^53 and a result
-- below 2^53: shift-and-add on the remainder, never summing past c.
local function muldiv(a, b, c)
	local p = a * b
	if p < TWO53 then
		local q = idiv(p, c)
		return q, p - q * c
	end
	local qb = idiv(b, c)
	local rb = b - qb * c
	local bits, x = {}, a
	while x > 0 do
		local h = x % 2
		bits[#bits + 1] = h
		x = (x - h) / 2
	end
	local q, r = 0, 0
	for i = #bits, 1, -1 do
		q = q * 2
		if r >= c - r then r = r - (c - r); q = q + 1 else r = r + r end
		if bits[i] == 1 then
			if r >= c - rb then r = r - (c - rb); q = q + 1 else r = r + rb end
		end
	end
	return a * qb + q, r
end

local function muldiv_ceil(a, b, c)
	local q, r = muldiv(a, b, c)
	if r > 0 then q = q + 1 end
	return q
end

local function num(v) if v then return tonumber(v) end return nil end

-- The first read of a check's key. A key of a type this algorithm does
-- not use was left by another algorithm (a reload changed the rule's
-- algorithm, keeping its name and key): its state means nothing here, so
-- it is dropped and the key starts fresh, as the local tier does. Without
-- this, WRONGTYPE would fail the whole batch until the key expired.
-- (GCRA and leaky bucket read with MGET, which answers nil for another
-- type, and their SET replaces it.)
local function read(cmd, key, ...)
	local r = redis.pcall(cmd, key, ...)
	if type(r) == 'table' and r.err then
		if string.sub(r.err, 1, 9) ~= 'WRONGTYPE' then error(r) end
		if VIEW then	-- said, not dropped: a view writes nothing
			error({ err = 'WRONGTYPE the key holds the state of ' ..
				'another algorithm; a check of this rule would ' ..
				'start it afresh' })
		end
		call('DEL', key)
		r = call(cmd, key, ...)
	end
	return r
end
local function max0(v) if v > 0 then return v end return 0 end

local function res(allowed, rem, retry, nxt, full)
	return { allowed, rem, retry, nxt, full }
end

-- ---- GCRA and leaky bucket: p1 = EI, p2 = DVT, p3 = max_delay ----------
-- Evaluated inline in the batch loop below, charged by gcra_commit(): the
-- one GCRA.

-- ---- the other algorithms -------------------------------------------
-- Built on the first check that needs them: every closure here would
-- otherwise be made again on every call, and a batch of GCRA or leaky
-- bucket checks (the default) uses none of them.

local function other_algorithms()
	-- ---- token bucket: p1 = N, p2 = P, p3 = burst; hash t (millionths), l -
	-- l is the refill's anchor: one unit per EI = max(1, floor(P / N)), as
	-- GCRA, and a charge keeps the anchor (lim_gcra.c says why).

	-- the bucket now: tok, refilled from base at the anchor at = now - el
	local function tb_view(c)
		local full = c.p3 * MICRO
		c.ei = max(1, idiv(c.p2, c.p1))
		local v = { tok = full, base = full, el = 0, at = now }
		local r = read('HMGET', c.key, 't', 'l')
		if not r[1] then return v end
		local tok, last = tonumber(r[1]), tonumber(r[2])
		local need = full - tok
		if need <= 0 then return v end
		v.tok, v.base, v.el, v.at = tok, tok, now - last, last
		if v.el <= 0 then v.el = 0; return v end
		if v.el >= muldiv_ceil(need, c.ei, MICRO) then
			v.tok, v.base, v.el, v.at = full, full, 0, now
			return v
		end
		v.tok = tok + (muldiv(v.el, MICRO, c.ei))
		return v
	end

	local function tb_until(c, v, level)
		if v.tok >= level then return 0 end
		local t = muldiv_ceil(level - v.base, c.ei, MICRO)
		if t > v.el then return t - v.el end
		return 0
	end

	local function tb_fill(c, allowed, retry, v)
		local full = c.p3 * MICRO
		local rem = 0
		if v.tok > 0 then rem = idiv(v.tok, MICRO) end
		local nxt = 0
		if v.tok < full then
			nxt = tb_until(c, v, v.tok - v.tok % MICRO + MICRO)
		end
		return res(allowed, rem, retry, nxt, tb_until(c, v, full))
	end

	local function tb_eval(c)
		local v = tb_view(c)
		c.v = v
		if c.cost > c.p3 then return tb_fill(c, -1, 0, v), c.op == FORCE end
		local want = c.cost * MICRO
		if v.tok < want then
			return tb_fill(c, 0, tb_until(c, v, want), v), c.op == FORCE
		end
		local after = { tok = v.tok - want, base = v.base - want, el = v.el }
		return tb_fill(c, 1, 0, after), c.cost > 0
	end

	-- A FORCE below -full starts again at exactly -full now (GCRA's clamp).
	local function tb_commit(c)
		-- the same key charged earlier in this call: charge on top
		if not committed then committed = {} end
		if committed[c.key] then c.v = tb_view(c) end
		committed[c.key] = true
		local full, v = c.p3 * MICRO, c.v
		local want = min(c.cost, 2 * c.p3) * MICRO
		local w = { tok = v.tok - want, base = v.base - want, el = v.el }
		local at = v.at
		if w.tok < -full then
			w.tok, w.base, w.el, at = -full, -full, 0, now
		end
		call('HSET', c.key, 't', s(w.base), 'l', s(at))
		call('PEXPIRE', c.key, s(max(1, ceil_ms(tb_until(c, w, full)))))
	end

	-- ---- windows: p1 = L, p2 = W, p3 = calendar (fixed only) -----------

	local function civil(z)
		z = z + 719468
		local era = idiv(z, 146097)
		local doe = z - era * 146097
		local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524)
			- idiv(doe, 146096), 365)
		local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
		local mp = idiv(5 * doy + 2, 153)
		local m = mp < 10 and mp + 3 or mp - 9
		local y = yoe + era * 400
		if m <= 2 then y = y + 1 end
		return y, m
	end

	local function days_from_civil(y, m)
		if m <= 2 then y = y - 1 end
		local era = idiv(y, 400)
		local yoe = y - era * 400
		local mm = m > 2 and m - 3 or m + 9
		local doy = idiv(153 * mm + 2, 5)
		local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + doy
		return era * 146097 + doe - 719468
	end

	local function bounds(c)
		if c.algo == FW and c.p3 == 2 then
			local y, m = civil(idiv(now, DAY))
			local st = days_from_civil(y, m) * DAY
			local en
			if m == 12 then en = days_from_civil(y + 1, 1)
			else en = days_from_civil(y, m + 1) end
			return y * 12 + m - 1, st, en * DAY
		end
		local idx = idiv(now, c.p2)
		return idx, idx * c.p2, idx * c.p2 + c.p2
	end

	-- The window counters are fields of a hash at the declared key, so that
	-- in Redis Cluster they move with it: a slot migration's ASK finds them,
	-- and MIGRATE never meets a key already made on the importing node.
	local function fw_eval(c)
		local idx, st, en = bounds(c)
		c.idx = idx
		c.en = en
		local count = num(read('HGET', c.key, s(idx))) or 0
		local L = c.p1
		if c.cost > L then
			return res(-1, max0(L - count), 0, en - now, en - now), c.op == FORCE
		end
		if count + c.cost > L then
			return res(0, max0(L - count), en - now, en - now, en - now),
				c.op == FORCE
		end
		return res(1, L - count - c.cost, 0, en - now, en - now), c.cost > 0
	end

	-- The TTL of a window hash, <ms>, unless it has a longer one: it may
	-- hold a later window's field (Redis TIME stepped back across a
	-- boundary since it was written: a failover), which lives to its own
	-- window's end; cut to this one's, it went with the key.
	local function window_ttl(key, ms)
		if call('PTTL', key) < ms then call('PEXPIRE', key, s(ms)) end
	end

	-- The hash expires with its window, so at most the last window's field
	-- is left to drop.
	local function fw_commit(c)
		call('HINCRBY', c.key, s(c.idx), s(c.cost))
		call('HDEL', c.key, s(c.idx - 1))
		window_ttl(c.key, ceil_ms(c.en - now) + MARGIN_MS)
	end

	-- Sliding window: allowed iff prev * (W - e) + (cur + cost) * W <=
	-- L * W, no floor anywhere (lim_window.c says why). With integer cur,
	-- cost and L, that is ceil(prev * (W - e) / W) + cur + cost <= L:
	-- the estimate rounded up (units) is one muldiv, exact past 2^53,
	-- and no product such as L * W is ever formed. remaining = L - units.

	-- largest x in [0, W] with a * x <= t * W, for 0 <= t < a
	local function sw_xmax(a, t, w) return (muldiv(t, w, a)) end

	-- µs until units <= target: this window, else the next one
	local function sw_until(v, target)
		if v.cur <= target then
			local t = target - v.cur
			if v.prev <= t then return 0 end
			return max0(v.w - sw_xmax(v.prev, t, v.w) - v.e)
		end
		return v.w - v.e + (v.w - sw_xmax(v.cur, target, v.w))
	end

	local function sw_eval(c)
		local idx, st = bounds(c)
		local r = read('HMGET', c.key, s(idx), s(idx - 1))
		c.idx = idx
		c.st = st
		local v = {
			cur = num(r[1]) or 0,
			prev = num(r[2]) or 0,
			w = c.p2, e = now - st,
		}
		local L = c.p1
		local units = muldiv_ceil(v.prev, v.w - v.e, v.w) + v.cur
		local allowed, retry, charge = 1, 0, c.cost > 0
		if c.cost > L then
			allowed, charge = -1, c.op == FORCE
		elseif units + c.cost > L then
			allowed, charge = 0, c.op == FORCE
			retry = sw_until(v, L - c.cost)
		else
			v.cur = v.cur + c.cost
			units = units + c.cost
		end
		local nxt, full = 0, sw_until(v, 0)
		if units > 0 then nxt = sw_until(v, units - 1) end
		return res(allowed, max0(L - units), retry, nxt, full), charge
	end

	-- Fields: this window and the last; the hash lives two windows.
	local function sw_commit(c)
		call('HINCRBY', c.key, s(c.idx), s(c.cost))
		call('HDEL', c.key, s(c.idx - 2))
		window_ttl(c.key, ceil_ms(c.st + 2 * c.p2 - now) + MARGIN_MS)
	end

	-- ---- sliding log: p1 = L, p2 = W; zset of timestamps ---------------

	-- The set's key lives until its latest member is dead: its score plus
	-- <w> (an entry's stamp + W; a lease's expiry, w = 0). The latest is
	-- not always the one just added: Redis TIME may have stepped back
	-- since another was written (a failover), or a reload shortened the
	-- lease, and a TTL from now dropped those members, live, with the key.
	local function zset_ttl(key, w)
		local top = call('ZRANGE', key, -1, -1, 'WITHSCORES')
		call('PEXPIRE', key, s(max(1, ceil_ms(tonumber(top[2]) + w - now))))
	end

	local function zscore_at(key, lo, hi, offset, rev)
		local r
		if rev then
			r = call('ZREVRANGEBYSCORE', key, hi, lo, 'WITHSCORES',
				'LIMIT', offset, 1)
		else
			r = call('ZRANGEBYSCORE', key, lo, hi, 'WITHSCORES',
				'LIMIT', offset, 1)
		end
		if r[2] then return tonumber(r[2]) end
		return nil
	end

	local function log_eval(c)
		local L, W = c.p1, c.p2
		local lo = '(' .. s(now - W)
		local live = read('ZCOUNT', c.key, lo, '+inf')
		local after, retry = live, 0
		local oldest = zscore_at(c.key, lo, '+inf', 0, false) or now
		local newest = zscore_at(c.key, lo, '+inf', 0, true) or now
		local allowed, charge = 1, c.cost > 0
		if c.cost > L then
			allowed, charge = -1, c.op == FORCE
		elseif live + c.cost > L then
			allowed, charge = 0, c.op == FORCE
			retry = zscore_at(c.key, lo, '+inf', live + c.cost - L - 1, false)
				+ W - now
		elseif c.cost > 0 then
			after = live + c.cost
			newest = now
		end
		local nxt, full = 0, 0
		if after > 0 then nxt, full = oldest + W - now, newest + W - now end
		return res(allowed, max0(L - after), retry, nxt, full), charge
	end

	local function log_commit(c)
		local L, W = c.p1, c.p2
		call('ZREMRANGEBYSCORE', c.key, '-inf', s(now - W))
		local m = c.member
		if m == '' then m = s(now) .. '.' .. c.idx end
		local add, ts = min(c.cost, L), s(now)
		for i = 1, add do
			if i == 1 then call('ZADD', c.key, ts, m)
			else call('ZADD', c.key, ts, m .. '#' .. i) end
		end
		local card = call('ZCARD', c.key)
		if card > L then
			call('ZREMRANGEBYRANK', c.key, 0, card - L - 1)
		end
		zset_ttl(c.key, W)
	end

	-- ---- concurrency: p1 = L, p2 = lease; zset member -> expiry --------

	-- earliest and latest live expiries of members other than <m>
	local function conc_others(key, lo, m)
		local a = call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES',
			'LIMIT', 0, 2)
		local b = call('ZREVRANGEBYSCORE', key, '+inf', lo, 'WITHSCORES',
			'LIMIT', 0, 2)
		local e, l
		if a[1] and a[1] ~= m then e = tonumber(a[2])
		elseif a[3] then e = tonumber(a[4]) end
		if b[1] and b[1] ~= m then l = tonumber(b[2])
		elseif b[3] then l = tonumber(b[4]) end
		return e, l
	end

	local function conc_times(e, l, own)
		if own > 0 then
			if not e or own < e then e = own end
			if not l or own > l then l = own end
		elseif not e then
			return 0, 0
		end
		return e - now, l - now
	end

	local function conc_eval(c)
		local L = c.p1
		local lo = '(' .. s(now)
		local live = read('ZCOUNT', c.key, lo, '+inf')
		local sc = num(call('ZSCORE', c.key, c.member))
		local has = sc ~= nil and sc > now
		local e, l = conc_others(c.key, lo, c.member)
		local others = live
		if has then others = live - 1 end
		if c.op == RELEASE then
			local nxt, full = conc_times(e, l, 0)
			return res(1, max0(L - others), 0, nxt, full), has
		end
		local own = 0
		if has then own = sc end
		local need = 0
		if c.cost > 0 and not has then need = 1 end
		if live + need > L then
			local nxt, full = conc_times(e, l, own)
			return res(0, max0(L - live), nxt, nxt, full), c.op == FORCE
		end
		if c.cost > 0 then own = now + c.p2 end
		local nxt, full = conc_times(e, l, own)
		return res(1, max0(L - live - need), 0, nxt, full), c.cost > 0
	end

	local function conc_commit(c)
		call('ZREMRANGEBYSCORE', c.key, '-inf', s(now))
		call('ZREM', c.key, c.member)
		if c.op == RELEASE or c.cost <= 0 then return end
		if call('ZCARD', c.key) >= c.p1 then
			call('ZREMRANGEBYRANK', c.key, 0, 0)
		end
		call('ZADD', c.key, s(now + c.p2), c.member)
		zset_ttl(c.key, 0)
	end

	-- ---- dispatch ------------------------------------------------------

	-- GCRA and leaky bucket never come here: the batch evaluates them.
	local EVAL = { [TB] = tb_eval, [FW] = fw_eval, [SW] = sw_eval,
		[LOG] = log_eval, [CONC] = conc_eval }
	local COMMIT = { [TB] = tb_commit, [FW] = fw_commit, [SW] = sw_commit,
		[LOG] = log_commit, [CONC] = conc_commit }

	local function eval_check(c)
		local f = EVAL[c.algo]
		if not f then return res(-1, 0, 0, 0, 0), false end
		if c.op == PEEK then	-- decided as CHECK, never charged
			c.op = CHECK
			local r = eval_check(c)
			c.op = PEEK
			return r, false
		end
		if c.cost < 0 then c.cost = 0 end
		if c.op == RELEASE and c.algo ~= CONC then c.cost = 0 end
		if c.cost > COST_MAX then	-- reported as a peek, never charged
			local op = c.op
			c.cost, c.op = 0, CHECK
			local r = f(c)
			c.op = op
			r[1], r[3] = -1, 0
			return r, false
		end
		return f(c)
	end
	return eval_check, COMMIT
end


-- ---- the batch ------------------------------------------------------------
-- The hot path builds no table per check: results go straight into <out>,
-- and the pending charges of a request of several checks sit in parallel
-- arrays reused across requests (and across calls under FCALL: every index
-- read in a call is written first in that call); a request of one check
-- (the usual) is charged as soon as it is decided. GCRA and leaky bucket
-- (the defaults) are evaluated inline with plain locals, on values read by
-- one MGET of every base key (nil for a key of another type); every other
-- algorithm goes through a check table.
--
-- The hot path's floor(a / b) is idiv() written out, without its two
-- function calls: q = a / b, then q - q % 1, which is floor(q) exactly
-- (Lua's q % 1 is q - floor(q), a difference that is exact), except for
-- q = +-inf or NaN, where q % 1 is NaN and q is left as it is, as floor()
-- would leave it.

local ki_, r_, tat_, cost_, gen_, charge_ = {}, {}, {}, {}, {}, {}
local rm_ = {}	-- the request id of a pending reservation, or false
local ralgo, rp1, rp2, rp3, rtol = {}, {}, {}, {}, {}
-- per rule: the penalty box (limiter.h "penalty box"; 0 0 without one)
local rblk, rbmax = {}, {}
-- per rule: the reservation lease in µs (reserve:), 0 for the others
local rres = {}
-- per GCRA / leaky bucket rule: the largest cost that can ever fit,
-- floor(tol / EI), and the most one charge adds, floor(2 tol / EI) + 1
local rfit, rcmax = {}, {}

-- A GCRA / leaky bucket value, "<tat>.0<ei>" (the emission interval it
-- was charged at, as the digits after ".0"), as a TAT under rule <r>'s
-- interval. The TAT is the units spent times the interval: when a plan,
-- an override or a reload changes the rate, the units are kept, not the
-- time (3 units spent at 20 s each read as 600 at 0.1 s would refuse a
-- tenant whose limit was just raised), bounded by the most a charge
-- leaves, now + 2 tol. An older script's tonumber() reads the value as
-- exactly <tat> (a fraction below 0.1 is under half the spacing of
-- doubles near Redis TIME in µs: 0.25 from 2^50 µs, 2005, to 2^51, 2041),
-- as it did before; a bare "<tat>", which it writes, is of an unknown
-- interval and read as it is. The second result is true when the TAT was
-- rescaled: kept at the old interval, it would run out at the old rate
-- (a denial writes nothing), so the caller writes it back at the new one.
-- A value that is no TAT below 2^53 (inf, nan, an operator's SET) or of
-- no interval above 0 and below 2^53 is none: written back, it failed
-- the whole call.
local gcra_scale
local function gcra_read(v, r)
	if not v then return nil end
	local sep = string.find(v, '.', 1, true)
	if not sep then
		local tat = tonumber(v)
		if tat and tat < TWO53 then return tat end
		return nil
	end
	local tat, was = tonumber(string.sub(v, 1, sep - 1)),
		tonumber(string.sub(v, sep + 2))
	if not tat or not was or not (tat < TWO53 and was > 0 and was < TWO53)
	then
		return nil
	end
	return gcra_scale(tat, was, r)
end

-- TAT <tat>, charged at interval <was>, under rule <r>'s (gcra_read()).
function gcra_scale(tat, was, r)
	local ei = rp1[r]
	if was == ei or tat <= now then return tat end
	local d, cap = tat - now, 2 * rtol[r]
	if idiv(d, was) > idiv(cap, ei) then return now + cap, true end
	d = muldiv_ceil(d, ei, was)
	if d > cap then d = cap end
	return now + d, true
end

-- <tat>, which this call wrote to <key>, under rule <r>'s interval: two
-- requests of one key in a call can be of two rates (a plan, an override
-- or a reload changed it between them).
local function gcra_seen(key, tat, r)
	local was = seenei_ and seenei_[key]
	if was and was ~= rp1[r] then return gcra_scale(tat, was, r) end
	return tat
end

-- The GCRA / leaky bucket charge of check <ki> under rule <r> (ALGORITHMS.md;
-- the C twin is lim_gcra.c), from the TAT its evaluation read.
local function gcra_commit(ki, tat, cost, r)
	local key, ei = KEY[ki], rp1[r]
	-- the same key charged earlier in this call: charge on top of it
	local cur = seen_[key]
	if cur then
		cur = gcra_seen(key, cur, r)
		if cur > tat then tat = cur end
	end
	local cmax = rcmax[r]
	if cost > cmax then cost = cmax end
	local new = tat + ei * cost
	local cap = now + 2 * rtol[r]
	if tat > cap then cap = tat end
	if new > cap then new = cap end
	seen_[key] = new
	if seenei_ then seenei_[key] = ei end
	-- the TTL in ms, ceil((new - now) / 1000) = idiv(new - now + 999, 1000)
	local a = new - now + 999
	local ms = a / 1000
	local f = ms % 1
	if f == f then ms = ms - f end
	if ms * 1000 > a then ms = ms - 1
	elseif (ms + 1) * 1000 <= a then ms = ms + 1 end
	call('SET', key, format('%d.0%d', new, ei), 'PX', format('%d', ms))
end

-- The values of every base key, in KEYS order (nil for a key of another
-- type).
local function read_bases()
	if #KEY == 0 then return {} end
	if #KEY <= 512 then return call('MGET', unpack(KEY)) end
	local v = {}	-- unpack() has a stack limit
	for b = 1, #KEY, 512 do
		local r = call('MGET', unpack(KEY, b, min(b + 511, #KEY)))
		for j = 1, #r do v[b + j - 1] = r[j] end
	end
	return v
end

-- The rule tuples: algo p1 p2 p3 block block_max (tol = p2 + p3 for GCRA /
-- leaky bucket). Returns where the requests start in ARGV.
local function read_rules()
	local a, ei = 3, nil
	seenei_ = nil
	for r = 1, tonumber(ARG[2]) do
		ralgo[r], rp1[r] = tonumber(ARG[a]), tonumber(ARG[a + 1])
		rp2[r], rp3[r] = tonumber(ARG[a + 2]), tonumber(ARG[a + 3])
		rblk[r], rbmax[r] = tonumber(ARG[a + 4]), tonumber(ARG[a + 5])
		rres[r] = tonumber(ARG[a + 6])
		rtol[r] = rp2[r] + rp3[r]
		if ralgo[r] == GCRA or ralgo[r] == LEAKY then
			rfit[r] = idiv(rtol[r], rp1[r])
			rcmax[r] = idiv(2 * rtol[r], rp1[r]) + 1
			if ei and ei ~= rp1[r] then seenei_ = {} end
			ei = rp1[r]
		end
		a = a + 7
	end
	return a
end

-- ---- penalty box (limiter.h; the C twin is lim_block.c) ----------------
-- The record "<until_us> <offences>" at "<key>!b" (the key's hash tag, so
-- its Cluster slot), read and written here, in the decision's own call.
-- Only rules with block > 0 come here: one GET per check of such a rule.

local function block_read(bkey)
	local v = call('GET', bkey)
	if not v then return 0, 0 end
	local sp = string.find(v, ' ', 1, true)
	if not sp then return 0, 0 end
	return tonumber(string.sub(v, 1, sp - 1)) or 0,
		tonumber(string.sub(v, sp + 1)) or 0
end

-- An offence of check <ki> under rule <r> at <now>: the block period of
-- the offence (doubled per repeat within the quiet period, capped at
-- block_max), written with the record's TTL to the end of the quiet
-- period. The record exists only while that period runs, so finding one
-- is finding a repeat: <n> is the offences block_read() found there.
local function block_offend(ki, r, n)
	local bkey, d, cap = KEY[ki] .. '!b', rblk[r], rbmax[r]
	n = n + 1
	if cap <= 0 then n = 1 end
	for _ = 2, n do
		if d >= cap then break end
		d = d * 2
	end
	if cap > 0 and d > cap then d = cap end
	call('SET', bkey, s(now + d) .. ' ' .. s(n), 'PX',
		s(max(1, ceil_ms(d + max0(cap)))))
	return d
end

local eval_check, COMMIT

local function generic(ki, r, op, cost, member)
	if not eval_check then eval_check, COMMIT = other_algorithms() end
	local c = {
		key = KEY[ki], idx = ki, algo = ralgo[r], op = op, cost = cost,
		p1 = rp1[r], p2 = rp2[r], p3 = rp3[r], member = member,
	}
	local res1, charge = eval_check(c)
	out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
		res1[1], res1[2], res1[3], res1[4], res1[5]
	return res1[1], charge, c
end

-- ---- reserve, then settle (limiter.h has the contract) -------------------
-- A reservation is a CHECK of a rule with a lease (rres), charged as any
-- CHECK; when its request passes, reserve_record() notes what it held
-- under the request id. The settle (a FORCE with the id) is settle():
-- applied at once, exactly once, since it deletes the record it reads.

local function reserve_key(ki, member) return KEY[ki] .. ':r:' .. member end

-- The record of a reservation of <cost> that passed: the units and the
-- window index they went to (fixed and sliding windows: "<cost>:<idx>",
-- idx > 0); GCRA "<cost>:-<ei>" (the emission interval the units were
-- charged at), token bucket "<cost>:-0", so that a settle after a reload
-- or an override changed the rule's rate or algorithm gives back what was
-- taken, from the state it went to. Every form is "<number>:<number>":
-- an older script reads the middle field with tonumber() and formats it
-- as a window field, so a third field (nil there) failed its whole call.
local function reserve_record(ki, r, cost, member, c)
	local v
	if ralgo[r] == GCRA then v = s(cost) .. ':-' .. s(rp1[r])
	elseif ralgo[r] == TB then v = s(cost) .. ':-0'
	else v = s(cost) .. ':' .. s(c.idx) end
	call('SET', reserve_key(ki, member), v, 'PX', s(max(1, ceil_ms(rres[r]))))
end

-- The GCRA TAT of check <ki> under rule <r> as this call sees it (nil:
-- fresh).
local function gcra_tat(ki, r)
	local cur = seen_[KEY[ki]]
	if cur then return (gcra_seen(KEY[ki], cur, r)) end
	return gcra_read(val_[ki], r)
end

-- A field of the hash at <key> as a number; nil when the key holds another
-- algorithm's state (a reload changed the rule's algorithm): nothing of
-- this algorithm to give back, and no WRONGTYPE to fail the call.
local function hget_state(key, f)
	local v = redis.pcall('HGET', key, f)
	if type(v) == 'table' then return nil end
	return num(v)
end

-- Gives back <d> units charged to check <ki> (the window <idx> for
-- windows), bounded by the fresh state.
local function settle_refund(ki, r, d, idx)
	local key, algo = KEY[ki], ralgo[r]
	if algo == GCRA then
		local tat = gcra_tat(ki, r)
		if not tat or tat <= now then return end
		-- gcra_read() gave the TAT at the rule's interval; a bare one (an
		-- older script's) is at the reservation's own (idx), if recorded
		local ei, v = rp1[r], not seen_[key] and val_[ki]
		if v and not string.find(v, '.', 1, true) and idx and idx > 0 then
			ei = idx
		end
		local new = tat - ei * d
		if new <= now then
			call('DEL', key)
			seen_[key] = now
		else
			call('SET', key, s(new) .. '.0' .. s(rp1[r]), 'PX',
				s(ceil_ms(new - now)))
			seen_[key] = new
		end
		if seenei_ then seenei_[key] = rp1[r] end
	elseif algo == TB then
		local tok = hget_state(key, 't')
		if not tok then return end
		local full = rp3[r] * MICRO
		local new = min(tok + d * MICRO, full)
		call('HSET', key, 't', s(new))
	else	-- FW, SW: the counter the reservation went to
		local f = s(idx)
		local n = hget_state(key, f)
		if not n or n <= 0 then return end
		call('HINCRBY', key, f, s(-min(d, n)))
	end
end

-- Charges <d> more units to check <ki>, as a FORCE now.
local function settle_charge(ki, r, d)
	if d > COST_MAX then d = COST_MAX end
	if ralgo[r] == GCRA then
		local tat = gcra_tat(ki, r) or now
		if tat < now then tat = now end
		gcra_commit(ki, tat, d, r)
		return
	end
	if not eval_check then eval_check, COMMIT = other_algorithms() end
	local c = {
		key = KEY[ki], idx = ki, algo = ralgo[r], op = FORCE, cost = d,
		p1 = rp1[r], p2 = rp2[r], p3 = rp3[r], member = '',
	}
	local _, charge = eval_check(c)
	if charge then COMMIT[c.algo](c) end
end

-- The settle of check <ki> with the actual <cost> (-1: keep the
-- reservation), its results at out[o+1..o+5].
local function settle(ki, r, cost, member)
	out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
		1, -1, 0, 0, 0
	local rk = reserve_key(ki, member)
	local v = call('GET', rk)
	if not v then return end
	call('DEL', rk)
	-- reserve_record()'s forms; "<held>:0" is an older script's GCRA or
	-- token bucket record (refunded at the rule's rate, as it did), and
	-- "<held>:<ei>:<algo>" the form of d5d43a2's. A record this script
	-- cannot read is dropped as none: never an error that fails the call.
	local sep = string.find(v, ':', 1, true)
	local held = sep and tonumber(string.sub(v, 1, sep - 1))
	local rest = sep and string.sub(v, sep + 1) or ''
	local sep2 = string.find(rest, ':', 1, true)
	local algo, idx, same = ralgo[r], nil, false
	if sep2 then
		idx = tonumber(string.sub(rest, 1, sep2 - 1))
		same = tonumber(string.sub(rest, sep2 + 1)) == algo
	elseif rest == '-0' then
		idx, same = 0, algo == TB
	else
		idx = tonumber(rest)
		if not idx then
		elseif idx < 0 then idx, same = -idx, algo == GCRA
		elseif idx > 0 then same = algo == FW or algo == SW
		else same = algo == GCRA or algo == TB end
	end
	if not held or held < 0 or not idx then return end
	out[o + 2] = held
	if cost < 0 or cost == held then return end
	if cost > held then settle_charge(ki, r, cost - held)
	elseif same then settle_refund(ki, r, held - cost, idx) end
end

-- KEYS and ARGV as agent/limiter/limiter.h says; the reply is five integers per
-- check, in order, then the call's <now> (the TIME that named every window
-- it charged: a Cluster refund undoes that window, not the one of its own
-- time), packed into one msgpack array (agent/store/results.h: packing
-- costs Redis what converting the table would, and the agent reads one
-- string instead of an object per integer). The request loop is inline:
-- under FCALL a function call per request, and upvalues instead of locals
-- in the loop, cost 3.5 %
-- of Redis' instructions at 47 decisions per call (callgrind).
local function batch(keys, argv)
	if not call then
		call, tonumber, floor, min, max, format, unpack, mp_unpack,
			mp_pack, byte, rep = globals()
	end
	-- ARGV is one msgpack array (agent/store/batch.h), from every backend
	KEY, ARG = keys, mp_unpack(argv[1])
	VIEW = argv[2] == 'view'
	local t = call('TIME')
	now = tonumber(t[1]) * 1000000 + tonumber(t[2])
	-- <out> made at its full size, five results per key and <now>, in one
	-- go: grown one result at a time it is resized 7 times for 10 checks
	-- (callgrind: 1.5 % of Redis' instructions at 10 decisions per call).
	-- string.byte returns its values on the C stack (at most
	-- LUAI_MAXCSTACK, 8000). The slots of checks never made are cleared
	-- before the packing.
	local nout = 5 * #KEY + 1
	if nout <= 4000 then out = { byte(rep('\0', nout), 1, -1) }
	else out = {} end
	o, seen_, committed = 0, {}, nil	-- seen_: TATs written by this call
	val_ = read_bases()
	local a, ki = read_rules(), 1
	-- the hot loop's upvalues as locals (registers)
	local ARG, KEY, ralgo, rp1, rp2, rtol, rfit = ARG, KEY, ralgo, rp1, rp2,
		rtol, rfit
	local now, out, seen_, val_, tonumber = now, out, seen_, val_, tonumber
	local ki_, r_, tat_, cost_, gen_, charge_ =
		ki_, r_, tat_, cost_, gen_, charge_
	-- each request: its <n> checks all evaluated, then charged only if
	-- none vetoed. (ARG[a] + 0 is tonumber(ARG[a]) without a call, for a
	-- number or a numeric string; anything else, which tonumber() would
	-- turn into nil, fails the call here instead of one line later.)
	for _ = 1, tonumber(ARG[1]) do
		local n = ARG[a] + 0
		a = a + 1
		local veto = false
		for i = 1, n do
			-- code = (rule * 8 + op * 2 + shadow) * 2 + has_cost; cost 1
			-- when it is not sent
			local code, cost = ARG[a] + 0, 1
			a = a + 1
			if code % 2 == 1 then
				cost, a = tonumber(ARG[a]), a + 1
			end
			code = (code - code % 2) / 2
			local shadow = code % 2
			local op = (code - shadow) / 2 % 4
			local r = (code - shadow - 2 * op) / 8
			local algo, allowed, charge, tat, c = ralgo[r]
			-- a reserving rule's checks carry the request id
			local rm = false
			if rres[r] > 0 then
				rm, a = ARG[a], a + 1
				if rm == '' then rm = false end
			end
			local settling = rm and op == FORCE
			-- penalty box: µs left in the key's block, 0 when none (a
			-- concurrency RELEASE is never blocked, nor is a settle: the
			-- reservation it closes was admitted before the block; the
			-- policy refuses block on concurrency rules anyway)
			local boxed, left, offences = rblk[r] > 0 and op ~= RELEASE and
				not settling, 0, 0
			if boxed then
				local u
				u, offences = block_read(KEY[ki] .. '!b')
				if u > now then left = u - now end
			end
			if settling then
				settle(ki, r, cost, rm)
				allowed, charge, rm = 1, false, false
			elseif left > 0 then	-- blocked: denied, nothing charged
				if algo == LOG or algo == CONC then a = a + 1 end
				allowed, charge = 0, false
				out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
					0, 0, left, left, left
			elseif algo == GCRA or algo == LEAKY then
				-- GCRA / leaky bucket (ALGORITHMS.md; the C twin is
				-- lim_gcra.c): the five results at out[o+1..o+5]; the TAT
				-- read and the cost to charge kept for gcra_commit()
				local ei, tol = rp1[r], rtol[r]
				local v = val_[ki]	-- false for a key that is not there
				local moved
				tat = seen_[KEY[ki]]	-- written by this call
				if tat then
					if seenei_ then tat, moved = gcra_seen(KEY[ki], tat, r) end
				elseif v then
					tat, moved = gcra_read(v, r)
				end
				-- rescaled: kept so at once, charged or not (a peek too: a
				-- rule counting failures only peeks until a response
				-- fails, and a denied request has none); not for a view
				if moved and not VIEW then gcra_commit(ki, tat, 0, r) end
				tat = tat or 0
				if tat < now then tat = now end
				local retry, T = 0, tat
				allowed, charge = 1, op == FORCE
				if cost < 0 or op == RELEASE then cost = 0 end
				if cost > COST_MAX then	-- reported as a peek, never charged
					allowed, charge, cost = -1, false, 0
				elseif cost > rfit[r] then
					allowed = -1
				else
					local new = tat + ei * cost
					if new - tol > now then
						allowed, retry = 0, new - tol - now
					else
						T, charge = new, cost > 0
					end
				end
				if op == PEEK then charge = false end
				local full = T - now
				local d, rem, nxt = rp2[r] - full, 0, 0
				if d > 0 then	-- rem = idiv(d, ei)
					rem = d / ei
					local f = rem % 1
					if f == f then rem = rem - f end
					if rem * ei > d then rem = rem - 1
					elseif (rem + 1) * ei <= d then rem = rem + 1 end
				end
				if full > 0 then	-- nxt = full - idiv(full - 1, ei) * ei
					local b = full - 1
					local q = b / ei
					local f = q % 1
					if f == f then q = q - f end
					if q * ei > b then q = q - 1
					elseif (q + 1) * ei <= b then q = q + 1 end
					nxt = full - q * ei
				else
					full = 0
				end
				out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
					allowed, rem, retry, nxt, full
			else
				local member = ''
				if algo == LOG or algo == CONC then
					member, a = ARG[a], a + 1
				end
				allowed, charge, c = generic(ki, r, op, cost, member)
			end
			if boxed and left == 0 and allowed == 0 and
				(op == CHECK or op == PEEK) then	-- an offence
				local d = block_offend(ki, r, offences)
				out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, d, d, d
			end
			if (op == CHECK or op == PEEK) and allowed ~= 1 and shadow == 0 then
				veto = true
			end
			if rm and (op ~= CHECK or allowed ~= 1) then rm = false end
			if n == 1 then	-- alone in its request: nothing else can veto it
				if charge and not veto then
					if c then COMMIT[c.algo](c)
					else gcra_commit(ki, tat, cost, r) end
				end
				if rm and not veto then
					reserve_record(ki, r, cost, rm, c)
				end
			else
				rm_[i] = rm
				if rm then
					ki_[i], r_[i], cost_[i], gen_[i] = ki, r, cost, c or false
				end
				charge_[i] = charge
				if charge then
					ki_[i], r_[i], tat_[i], cost_[i], gen_[i] =
						ki, r, tat, cost, c or false
				end
			end
			ki, o = ki + 1, o + 5
		end
		if n > 1 and not veto then
			for i = 1, n do
				if charge_[i] then
					local c = gen_[i]
					if c then COMMIT[c.algo](c)
					else gcra_commit(ki_[i], tat_[i], cost_[i], r_[i]) end
				end
				if rm_[i] then
					reserve_record(ki_[i], r_[i], cost_[i], rm_[i],
						gen_[i] or nil)
				end
			end
		end
	end
	for j = o + 2, nout do out[j] = nil end	-- fewer checks than keys
	out[o + 1] = now
	return mp_pack(out)
end

-- The EVAL entry point. link.c loads this same text as a FUNCTION
-- library (Redis 7), with this one line replaced by the registration:
-- then every function above is made once, not on every call.
return batch(KEYS, ARGV)
