-- names_lib: what bind_name and end_name share, the two ends of an authorized
-- name's waiting mail (prepended; functions only, no key of its own).
-- uses: keys_lib

-- The name's keys, four from keys[base] on, by name:
--   allowed      hash  authorized name -> JSON {name, expires_ms, set_us}
--   allowed_due  zset  authorized names by expiry (ms)
--   waiting      zset  the name's waiting delivery ids by admission sequence
--   stats        hash  delivery counters
local function name_keys(keys, base)
  return {allowed = keys[base], allowed_due = keys[base + 1], waiting = keys[base + 2],
    stats = keys[base + 3]}
end

-- The deliveries waiting for the name, when every one is among `ids` (the
-- waiting deliveries the caller read); nil when a send has added one since,
-- so the caller reads them again.
local function waiting_as_read(n, ids)
  local given = {}
  for _, did in ipairs(ids) do given[did] = true end
  local waiting = redis.call("ZRANGE", n.waiting, 0, -1)
  for _, did in ipairs(waiting) do
    if not given[did] then return nil end
  end
  return waiting
end

-- The name's authorization ends: from now on a send resolves the name itself.
local function end_authorization(n, name)
  redis.call("HDEL", n.allowed, name)
  redis.call("ZREM", n.allowed_due, name)
end
