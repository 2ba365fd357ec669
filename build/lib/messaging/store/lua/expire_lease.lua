-- expire_lease: a non-idempotent transport's worker held the lease past its
-- end without recording an outcome (it died, or hangs). If its request was
-- handed off (mark_handed_off), whether it reached the receiver cannot be
-- known: record `unknown`. If not, nothing was sent: record `failed`. Never
-- retry; raise the fence so the old holder can no longer record anything.
--
-- KEYS[1]  due     zset    delivery ids by due time (ms)
-- KEYS[2]  dlv     hash    the delivery
-- KEYS[3]  events  stream  the sender's events
-- KEYS[4]  stats   hash    delivery counters
--
-- ARGV[1]  now, ms (decimal string)
-- ARGV[2]  now, us (decimal string)
-- ARGV[3]  error text for the attempt when the request was handed off
-- ARGV[4]  events stream cap (approximate MAXLEN)
-- ARGV[5]  the stats field of this delivery's dispatch latency bucket
-- ARGV[6]  its dispatch latency (admitted to outcome), ms
-- ARGV[7]  error text for the attempt when nothing was handed off
--
-- Idle notices come from `courier`, which has no event stream to tell.
--
-- Returns "unknown" or "failed" as recorded, 0 when the lease is still valid or free.

local d = redis.call("HMGET", KEYS[2], "fence", "lease_until_ms", "attempts", "id", "stage",
  "message_id", "recipient", "handed_off_fence", "sender_id")
local lease = tonumber(d[2] or "0")
if lease == 0 or lease >= tonumber(ARGV[1]) then
  return 0
end
local outcome, err = "unknown", ARGV[3]
if d[8] ~= d[1] then
  outcome, err = "failed", ARGV[7]
end
local attempts = cjson.decode(d[3])
local last = attempts[#attempts]
last.ended_us = ARGV[2]
last.error = err
last.outcome = outcome
redis.call("HSET", KEYS[2], "fence", tonumber(d[1]) + 1, "outcome", outcome,
  "provider_result_recorded_us", ARGV[2], "lease_until_ms", 0,
  "attempts", cjson.encode(attempts))
local stage = d[5]
if stage == "dispatch_started" then
  stage = "provider_result_recorded"
  redis.call("HSET", KEYS[2], "stage", stage)
end
redis.call("ZREM", KEYS[1], d[4])
redis.call("HINCRBY", KEYS[4], "outcome:" .. outcome, 1)
redis.call("HINCRBY", KEYS[4], ARGV[5], 1)
redis.call("HINCRBY", KEYS[4], "dispatch_ms_sum", ARGV[6])
if d[9] ~= "courier" then
  redis.call("XADD", KEYS[3], "MAXLEN", "~", ARGV[4], "*", "type", "delivery",
    "data", cjson.encode({delivery_id = d[4], message_id = d[6], recipient = d[7],
      stage = stage, outcome = outcome}))
end
return outcome
