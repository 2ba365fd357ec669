-- clock_lib: the store's clock, shared by every script that decides by time
-- (lease ends, expired leases, due times, endpoint holds) or stamps an
-- attempt's times (prepended; functions only). The store's clock rules, not
-- the caller's host's: a worker whose clock is off moves none of these. TIME
-- in a script that writes is safe: scripts replicate by their effects
-- (Valkey 8, Redis 7), so replicas and the AOF keep what the primary read.

-- The store's time, us (a number: exact, well below 2^53).
local function clock_us()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A time as records keep it: decimal digits, never an exponent.
local function time_text(t)
  return string.format("%d", t)
end
