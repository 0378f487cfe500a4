-- SPDX-License-Identifier: Apache-2.0
-- spoa-ratelimit: refunds for Redis Cluster. A request whose checks live
-- in several slots runs one ratelimit.lua call per slot; when one slot
-- denies (or fails), the agent undoes here what the other slots charged,
-- so a denied request is charged nowhere (ALGORITHMS.md, "Several rules").
--
-- KEYS  the base keys of the charged checks (one slot per call).
-- ARGV  9 fields per check: algo op cost p1 p2 p3 member at taken
--       the first six as ratelimit.lua got them; member the one it used
--       (sliding-log: the agent always sends one, so the entries added are
--       member, member#2, ... member#cost); at = the Redis TIME in us the
--       charging call ran at (the last value of its reply), which named
--       the window the fixed- and sliding-window charges went to, however
--       late this runs; taken = what the charge took (lim_charge_taken(),
--       from its reply): µs of TAT for GCRA and leaky bucket, millionths
--       of a token for token bucket, -1 for the others. A FORCE past the
--       burst is capped (a TAT at most now + 2 tolerance, at least -burst
--       tokens), so it can take less than its cost: giving the cost back
--       would leave the key fresher than before the vetoed request.
-- Reply the number of checks refunded.
--
-- Each undo is bounded below by the fresh state: a GCRA TAT never goes
-- below now, tokens never above the burst, counters never below 0.

local GCRA, TB, LEAKY, FW, SW, LOG, CONC = 0, 1, 2, 3, 4, 5, 6
local FORCE, RELEASE = 1, 2
local MICRO = 1000000
local DAY = 86400000000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- integers as decimal strings ('%d' is a C long: exact below 2^53)
local function s(n) return string.format('%d', n) end

local function idiv(a, b)
	local q = math.floor(a / b)
	if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
	return q
end

local function ceil_ms(us) return idiv(us + 999, 1000) end

-- Exact floor(a * b / c) for a, b, c < 2^53 and a result below 2^53
-- (ratelimit.lua's muldiv(), without the remainder).
local TWO53 = 9007199254740992
local function muldiv(a, b, c)
	local p = a * b
	if p < TWO53 then return idiv(p, c) end
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
	return a * qb + q
end

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

-- The hash field of the window charged at c.at (ratelimit.lua's bounds).
local function window_field(c)
	if c.algo == FW and c.p3 == 2 then
		local y, m = civil(idiv(c.at, DAY))
		return s(y * 12 + m - 1)
	end
	return s(idiv(c.at, c.p2))
end

-- The value is "<tat>.0<ei>" (ratelimit.lua's gcra_read()), or a bare
-- "<tat>" of an older script. <taken> is µs at the charge's interval, p1;
-- a TAT kept at another one (another agent's plan or override in
-- between) gives back the same units at its own.
local function gcra(c)
	local v = redis.call('GET', c.key) or ''
	local sep = string.find(v, '.', 1, true)
	local tat = tonumber(sep and string.sub(v, 1, sep - 1) or v)
	local ei = sep and tonumber(string.sub(v, sep + 2)) or c.p1
	-- inf, nan (an operator's SET): no TAT to give back to
	if not tat or not (tat < TWO53 and ei > 0 and ei < TWO53) then return end
	local back = c.taken
	if back < 0 then
		back = c.p1 * math.min(c.cost, idiv(2 * (c.p2 + c.p3), c.p1) + 1)
	end
	-- the same units at ei, rounded down (in doubles, one µs up at times)
	if ei ~= c.p1 then back = muldiv(back, ei, c.p1) end
	local new = tat - back
	if new <= now then
		redis.call('DEL', c.key)
	elseif sep then
		redis.call('SET', c.key, s(new) .. '.0' .. s(ei), 'PX',
			s(ceil_ms(new - now)))
	else
		redis.call('SET', c.key, s(new), 'PX', s(ceil_ms(new - now)))
	end
end

local function tb(c)
	local tok = tonumber(redis.call('HGET', c.key, 't') or '')
	if not tok then return end
	local full = c.p3 * MICRO
	local back = c.taken
	if back < 0 then back = math.min(c.cost, 2 * c.p3) * MICRO end
	local new = tok + back
	if new > full then new = full end
	redis.call('HSET', c.key, 't', s(new))
end

local function counter(c)
	local f = window_field(c)
	local n = tonumber(redis.call('HGET', c.key, f) or '')
	if not n or n <= 0 then return end
	redis.call('HINCRBY', c.key, f, s(-math.min(c.cost, n)))
end

local function log(c)
	local add = math.min(c.cost, c.p1)
	for i = 1, add do
		if i == 1 then redis.call('ZREM', c.key, c.member)
		else redis.call('ZREM', c.key, c.member .. '#' .. i) end
	end
end

local function conc(c)
	redis.call('ZREM', c.key, c.member)
end

local UNDO = { [GCRA] = gcra, [LEAKY] = gcra, [TB] = tb, [FW] = counter,
	[SW] = counter, [LOG] = log, [CONC] = conc }

-- A reservation (ratelimit.lua, reserve:) charged in a slot whose request
-- another slot vetoed: its record goes with the charge, so that a settle
-- finds nothing to refund or charge. Only reserving rules send a member
-- for these algorithms. Returns false when the record was already gone:
-- a settle came first (the agent's at 0 for a request it refused, or
-- HAProxy's for one a fail: open rule let pass) and gave the units back
-- or charged what was spent; refunded again, the key came back fresher
-- than before the request.
local function forget_reservation(c)
	if c.member ~= '' and c.op == 0 and (c.algo == GCRA or c.algo == TB or
	   c.algo == FW or c.algo == SW) then
		return redis.call('DEL', c.key .. ':r:' .. c.member) == 1
	end
	return true
end

local done = 0
for i = 1, #KEYS do
	local a = (i - 1) * 9
	local c = {
		key = KEYS[i], algo = tonumber(ARGV[a + 1]),
		op = tonumber(ARGV[a + 2]), cost = tonumber(ARGV[a + 3]),
		p1 = tonumber(ARGV[a + 4]), p2 = tonumber(ARGV[a + 5]),
		p3 = tonumber(ARGV[a + 6]), member = ARGV[a + 7] or '',
		at = tonumber(ARGV[a + 8]) or now,
		taken = tonumber(ARGV[a + 9]) or -1,
	}
	local f = UNDO[c.algo]
	if f and c.op ~= RELEASE and c.cost > 0 and
	   (c.algo ~= LOG or c.member ~= '') then
		if forget_reservation(c) then f(c) end
		done = done + 1
	end
end
return done
