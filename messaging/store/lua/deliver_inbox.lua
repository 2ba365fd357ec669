-- deliver_inbox: the inbox transport. Put each leased delivery in its
-- recipient's inbox (once: the delivery id is the member) and record the
-- outcome `accepted`, in one step, only under the holder's fencing token;
-- tell the recipient (a `message` event) and the sender (a `delivery` event).
--
-- KEYS[1]     seq    string  project sequence (inbox scores)
-- KEYS[2]     due    zset    delivery ids by due time (ms)
-- KEYS[3]     stats  hash    delivery counters
-- KEYS[4..]   four per delivery: its dlv hash, the recipient's inbox zset,
--             the recipient's events stream, the sender's events stream
--
-- ARGV[1]     now, us (decimal string)
-- ARGV[2]     events stream cap (approximate MAXLEN)
-- ARGV[3..]   three per delivery, in order: its fencing token, the stats
--             field of its dispatch latency bucket, that latency in ms
--
-- Returns the number of deliveries recorded; a stale token records nothing.

local recorded = 0
for p = 0, (#KEYS - 3) / 4 - 1 do
  local dlv, inbox = KEYS[4 + 4 * p], KEYS[5 + 4 * p]
  local d = redis.call("HMGET", dlv, "fence", "stage", "outcome", "id", "attempts",
    "message_id", "policy", "recipient")
  if d[1] == ARGV[3 + 3 * p] and d[2] == "dispatch_started" and not d[3] then
    if not redis.call("ZSCORE", inbox, d[4]) then
      redis.call("ZADD", inbox, redis.call("INCR", KEYS[1]), d[4])
    end
    local attempts = cjson.decode(d[5])
    attempts[#attempts].ended_us = ARGV[1]
    attempts[#attempts].outcome = "accepted"
    redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "accepted",
      "provider_result_recorded_us", ARGV[1], "lease_until_ms", 0,
      "attempts", cjson.encode(attempts))
    redis.call("ZREM", KEYS[2], d[4])
    redis.call("HINCRBY", KEYS[3], "outcome:accepted", 1)
    redis.call("HINCRBY", KEYS[3], ARGV[4 + 3 * p], 1)
    redis.call("HINCRBY", KEYS[3], "dispatch_ms_sum", ARGV[5 + 3 * p])
    redis.call("XADD", KEYS[6 + 4 * p], "MAXLEN", "~", ARGV[2], "*", "type", "message",
      "data", cjson.encode({message_id = d[6], delivery_id = d[4], notification_policy = d[7]}))
    redis.call("XADD", KEYS[7 + 4 * p], "MAXLEN", "~", ARGV[2], "*", "type", "delivery",
      "data", cjson.encode({delivery_id = d[4], message_id = d[6], recipient = d[8],
        stage = "provider_result_recorded", outcome = "accepted"}))
    recorded = recorded + 1
  end
end
return recorded
