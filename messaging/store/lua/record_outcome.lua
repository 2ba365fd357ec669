-- record_outcome: the transport's answer for one leased delivery, recorded
-- only under the holder's fencing token. A retry frees the lease and sets
-- when the delivery is due again; its stage does not change.
--
-- KEYS[1]  due     zset    delivery ids by due time (ms)
-- KEYS[2]  dlv     hash    the delivery
-- KEYS[3]  events  stream  the sender's events
--
-- ARGV[1]  fencing token of the lease
-- ARGV[2]  now, us (decimal string)
-- ARGV[3]  "accepted" | "rejected" | "failed" | "unknown" | "retry"
-- ARGV[4]  retry due time, ms (decimal string; used by "retry" only)
-- ARGV[5]  error text for the attempt ("" for none)
-- ARGV[6]  "1" when the recipient's side already showed it (delivery_observed)
-- ARGV[7]  events stream cap (approximate MAXLEN)
--
-- Returns 1 when recorded, 0 when the token is stale or nothing is leased.

local d = redis.call("HMGET", KEYS[2], "fence", "lease_until_ms", "attempts", "id", "stage",
  "message_id", "recipient")
if d[1] ~= ARGV[1] or not d[2] or d[2] == "0" then
  return 0
end
local attempts = cjson.decode(d[3])
local last = attempts[#attempts]
last.ended_us = ARGV[2]
last.outcome = ARGV[3]
if ARGV[5] ~= "" then last.error = ARGV[5] end
if ARGV[3] == "retry" then
  redis.call("HSET", KEYS[2], "lease_until_ms", 0, "retry_at_ms", ARGV[4],
    "attempts", cjson.encode(attempts))
  redis.call("ZADD", KEYS[1], ARGV[4], d[4])
  return 1
end
redis.call("HSET", KEYS[2], "outcome", ARGV[3], "provider_result_recorded_us", ARGV[2],
  "lease_until_ms", 0, "attempts", cjson.encode(attempts))
local stage = d[5]
if stage == "dispatch_started" then
  stage = "provider_result_recorded"
  redis.call("HSET", KEYS[2], "stage", stage)
end
if ARGV[6] == "1" and ARGV[3] == "accepted" and stage ~= "delivery_observed" then
  stage = "delivery_observed"
  redis.call("HSET", KEYS[2], "stage", stage, "delivery_observed_us", ARGV[2])
end
redis.call("ZREM", KEYS[1], d[4])
redis.call("XADD", KEYS[3], "MAXLEN", "~", ARGV[7], "*", "type", "delivery",
  "data", cjson.encode({delivery_id = d[4], message_id = d[6], recipient = d[7],
    stage = stage, outcome = ARGV[3]}))
return 1
