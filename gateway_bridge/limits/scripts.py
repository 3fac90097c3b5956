"""The Lua scripts of the Redis limits store (``redis_store``): one per
operation, each atomic on Redis. The keys and their layout are described in
``redis_store``; the algorithm is the in-process store's (``memory``), line
for line."""

NOW_MS = """
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function I(x) return string.format('%d', x) end
"""

ADMIT = (
    NOW_MS
    + r"""
local now = now_ms(ARGV[5])
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 1 then return {3} end
local rid, amount, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local hold, nc, nr = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local N, S, grace = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local cur = math.floor(now / S)

-- caps: purge reservations past their deadline, read used and reserved
local used, res, missing = {}, {}, {}
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  local v = redis.call('HMGET', k, 'u', 'r')
  if not v[1] then
    missing[#missing + 1] = k
  else
    local r = tonumber(v[2]) or 0
    local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
    if #gone > 0 then
      local freed = 0
      for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, '^(%-?%d+):')) end
      redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
      if freed ~= 0 then r = redis.call('HINCRBY', k, 'r', I(-freed)) end
    end
    used[i], res[i] = tonumber(v[1]), r
  end
end
if #missing > 0 then return {2, unpack(missing)} end

-- rules: drop the slots that left the window
local Q, T, O, NW = {}, {}, {}, {}
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  local h = redis.call('HMGET', k, 'Q', 'T', 'o', 'n')
  local q, t, o, n = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]), tonumber(h[4])
  local cutoff = cur - N
  if o and n < cutoff then
    redis.call('DEL', k); q, t, o, n = 0, 0, nil, nil
  elseif o and o < cutoff then
    local f = {}
    for s = o, cutoff - 1 do f[#f + 1] = 'q' .. I(s); f[#f + 1] = 't' .. I(s) end
    local vals = redis.call('HMGET', k, unpack(f))
    for x = 1, #vals, 2 do
      q = q - (tonumber(vals[x]) or 0); t = t - (tonumber(vals[x + 1]) or 0)
    end
    redis.call('HDEL', k, unpack(f))
    o = cutoff
    redis.call('HSET', k, 'Q', I(q), 'T', I(t), 'o', I(o))
  end
  Q[j], T[j], O[j], NW[j] = q, t, o, n
end

local function states(out)
  for j = 1, nr do
    local reset = 0
    if NW[j] and (Q[j] > 0 or T[j] > 0) then reset = (NW[j] + N + 1) * S - now end
    out[#out + 1] = Q[j]; out[#out + 1] = T[j]; out[#out + 1] = reset
  end
  return out
end

local function wait(k, j, field, total, need, limit)
  if not O[j] then return N * S end
  local freed = 0
  for s = O[j], NW[j] do
    freed = freed + (tonumber(redis.call('HGET', k, field .. I(s))) or 0)
    if total - freed + need <= limit then return (s + N + 1) * S - now end
  end
  return (NW[j] + N + 1) * S - now
end

for i = 1, nc do
  if used[i] + res[i] + amount > tonumber(ARGV[10 + i]) then
    return states({0, 1, i, used[i], res[i], now})
  end
end
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  local rpm, tpm = tonumber(ARGV[10 + nc + 2 * j - 1]), tonumber(ARGV[10 + nc + 2 * j])
  if rpm >= 0 and Q[j] + 1 > rpm then
    return states({0, 2, j, wait(k, j, 'q', Q[j], 1, rpm), 0, now})
  elseif tpm >= 0 and tokens > tpm then
    return states({0, 4, j, 0, 0, now})
  elseif tpm >= 0 and T[j] + tokens > tpm then
    return states({0, 3, j, wait(k, j, 't', T[j], tokens, tpm), 0, now})
  end
end

-- admitted: reserve on every bucket, count on every rule, keep the record
local deadline = now + hold
local member = ARGV[2] .. ':' .. rid
local ckeys, rkeys = {}, {}
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  redis.call('HINCRBY', k, 'r', ARGV[2])
  redis.call('ZADD', z, I(deadline), member)
  local pt = redis.call('PTTL', k)
  if pt > 0 then redis.call('PEXPIRE', z, pt) end
  ckeys[i] = k
end
for j = 1, nr do
  local k = KEYS[1 + 2 * nc + j]
  if not O[j] then redis.call('HSET', k, 'o', I(cur)); O[j] = cur end
  redis.call('HINCRBY', k, 'q' .. I(cur), 1)
  redis.call('HINCRBY', k, 't' .. I(cur), ARGV[3])
  Q[j] = redis.call('HINCRBY', k, 'Q', 1)
  T[j] = redis.call('HINCRBY', k, 'T', ARGV[3])
  redis.call('HSET', k, 'n', I(cur))
  NW[j] = cur
  redis.call('PEXPIRE', k, I((N + 2) * S))
  rkeys[j] = k
end
redis.call('SET', rec, cjson.encode({m = member, a = ARGV[2], t = ARGV[3], s = cur,
  c = ckeys, q = rkeys}), 'PX', I(hold + grace))
return states({1, 0, 0, 0, 0, now})
"""
)

FINISH = (
    NOW_MS
    + r"""
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
redis.call('DEL', KEYS[1])
local rec = cjson.decode(raw)
local settle = ARGV[1] == '1'
local nc = tonumber(ARGV[7])
for i = 1, nc do
  local k, z = KEYS[2 * i], KEYS[2 * i + 1]
  if redis.call('ZREM', z, rec.m) == 1 and rec.a ~= '0' then
    redis.call('HINCRBY', k, 'r', '-' .. rec.a)
  end
  if settle and ARGV[2] ~= '0' and redis.call('EXISTS', k) == 1 then
    redis.call('HINCRBY', k, 'u', ARGV[2])
  end
end
if not settle then return 1 end
local delta = tonumber(ARGV[3]) - tonumber(rec.t)
if delta == 0 then return 1 end
local now = now_ms(ARGV[4])
local N, S = tonumber(ARGV[5]), tonumber(ARGV[6])
local cutoff = math.floor(now / S) - N
if rec.s < cutoff then return 1 end
for j = 2 + 2 * nc, #KEYS do
  local k = KEYS[j]
  local f = 't' .. I(rec.s)
  if redis.call('HEXISTS', k, f) == 1 then
    redis.call('HINCRBY', k, f, I(delta))
    redis.call('HINCRBY', k, 'T', I(delta))
  end
end
return 1
"""
)

PURGE = (
    NOW_MS
    + r"""
local now = now_ms(ARGV[1])
local k = KEYS[1]
local v = redis.call('HMGET', k, 'u', 'r')
if not v[1] then return {0, 0, 0} end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
local r = tonumber(v[2]) or 0
if #gone > 0 then
  local freed = 0
  for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, '^(%-?%d+):')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if freed ~= 0 then r = redis.call('HINCRBY', k, 'r', I(-freed)) end
end
return {tonumber(v[1]), r, 1}
"""
)

SEED = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'r', 0)
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

CREDIT = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'u', ARGV[1])
return 1
"""
