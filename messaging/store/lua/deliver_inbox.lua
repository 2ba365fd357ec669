-- deliver_inbox: the inbox transport. Put each leased delivery in its
-- recipient's inbox (once: the delivery id is the member) and record the
-- outcome `accepted`, in one step, only under the holder's fencing token.
--
-- KEYS[1]     seq    string  project sequence (inbox scores)
-- KEYS[2]     due    zset    delivery ids by due time (ms)
-- KEYS[3..]   pairs: dlv hash, then the recipient's inbox zset
--
-- ARGV[1]     now, us (decimal string)
-- ARGV[2..]   the fencing token of each pair, in order
--
-- Returns the number of deliveries recorded; a stale token records nothing.

local recorded = 0
for p = 0, (#KEYS - 2) / 2 - 1 do
  local dlv, inbox = KEYS[3 + 2 * p], KEYS[4 + 2 * p]
  local d = redis.call("HMGET", dlv, "fence", "stage", "outcome", "id", "attempts")
  if d[1] == ARGV[2 + p] and d[2] == "dispatch_started" and not d[3] then
    if not redis.call("ZSCORE", inbox, d[4]) then
      redis.call("ZADD", inbox, redis.call("INCR", KEYS[1]), d[4])
    end
    local attempts = cjson.decode(d[5])
    attempts[#attempts].ended_us = ARGV[1]
    redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "accepted",
      "provider_result_recorded_us", ARGV[1], "lease_until_ms", 0,
      "attempts", cjson.encode(attempts))
    redis.call("ZREM", KEYS[2], d[4])
    recorded = recorded + 1
  end
end
return recorded
