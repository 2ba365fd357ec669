-- redrive: send a delivery again on the same route with the same delivery id.
-- Refused once the outcome is `accepted`, and while an attempt or retry is
-- still under way. The stage does not move back; the next attempt is recorded
-- and its outcome replaces the last one. The retry schedule starts over.
--
-- KEYS[1]  due  zset  delivery ids by due time (ms)
-- KEYS[2]  dlv  hash  the delivery
--
-- ARGV[1]  now, ms (decimal string)
--
-- Returns "ok", or why not: "missing", "accepted", "held" (waiting for its
-- user's release), "pending" (waiting for its name's first agent), "in_flight".

local due_key = KEYS[1]
local dlv = KEYS[2]
local now_ms = ARGV[1]

local d = redis.call("HMGET", dlv, "id", "outcome", "lease_until_ms", "redrive", "attempts",
  "held", "target")
if not d[1] then return "missing" end
if d[2] == "accepted" then return "accepted" end
if not d[2] and d[6] == "1" then return "held" end
if not d[2] and d[7] == "pending" then return "pending" end
if not d[2] or d[4] == "1" or (d[3] and d[3] ~= "0") then return "in_flight" end
redis.call("HSET", dlv, "redrive", 1, "retry_at_ms", 0,
  "round_base", #cjson.decode(d[5]))
redis.call("ZADD", due_key, now_ms, d[1])
return "ok"
