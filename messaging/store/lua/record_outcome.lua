-- record_outcome: the transport's answer for one leased delivery, recorded
-- only under the holder's fencing token. A retry frees the lease and sets
-- when the delivery is due again; its stage does not change.
--
-- KEYS[1]  due     zset    delivery ids by due time (ms)
-- KEYS[2]  dlv     hash    the delivery
-- KEYS[3]  events  stream  the sender's events
-- KEYS[4]  agents  hash    agent_id -> agent JSON (the endpoint's health)
-- KEYS[5]  stats   hash    delivery counters
--
-- ARGV[1]  fencing token of the lease
-- ARGV[2]  now, us (decimal string)
-- ARGV[3]  "accepted" | "rejected" | "failed" | "unknown" | "retry"
-- ARGV[4]  retry due time, ms (decimal string; used by "retry" only)
-- ARGV[5]  error text for the attempt ("" for none)
-- ARGV[6]  "1" when the recipient's side already showed it (delivery_observed)
-- ARGV[7]  events stream cap (approximate MAXLEN)
-- ARGV[8]  what the attempt says of the endpoint: "ok" (it answered),
--          "down" (no answer, or 408/429/5xx), "" (nothing known)
-- ARGV[9]  failures in a row that, lasting ARGV[10] ms or more, make the
--          endpoint unhealthy; ARGV[11] ms: how long it is then held before
--          the next attempt probes it; ARGV[12] now, ms
-- ARGV[13] the stats field of this delivery's dispatch latency bucket
-- ARGV[14] its dispatch latency (admitted to outcome), ms
--
-- An unhealthy endpoint's deliveries wait (lease_deliveries skips them) until
-- the hold ends; one attempt then probes it, and an answer makes it healthy.
--
-- Returns 1 when recorded, 0 when the token is stale or nothing is leased.

local d = redis.call("HMGET", KEYS[2], "fence", "lease_until_ms", "attempts", "id", "stage",
  "message_id", "recipient")
if d[1] ~= ARGV[1] or not d[2] or d[2] == "0" then
  return 0
end
local function endpoint_health()
  if ARGV[8] == "" then return end
  local id = redis.call("HGET", KEYS[2], "agent_id")
  local raw = redis.call("HGET", KEYS[4], id)
  if not raw then return end
  local agent = cjson.decode(raw)
  local ep = agent.endpoint
  if type(ep) ~= "table" then ep = {failures = 0} end
  local now_ms = tonumber(ARGV[12])
  if ARGV[8] == "ok" then
    if ep.failures == 0 and not ep.hold_until_ms then return end
    ep = {failures = 0}
  else
    ep.failures = ep.failures + 1
    ep.failing_since_ms = ep.failing_since_ms or ARGV[12]
    if ep.failures >= tonumber(ARGV[9])
        and now_ms - tonumber(ep.failing_since_ms) >= tonumber(ARGV[10]) then
      ep.hold_until_ms = string.format("%d", now_ms + tonumber(ARGV[11]))
    end
  end
  agent.endpoint = ep
  redis.call("HSET", KEYS[4], id, cjson.encode(agent))
end
endpoint_health()

local attempts = cjson.decode(d[3])
local last = attempts[#attempts]
last.ended_us = ARGV[2]
last.outcome = ARGV[3]
if ARGV[5] ~= "" then last.error = ARGV[5] end
if ARGV[3] == "retry" then
  redis.call("HINCRBY", KEYS[5], "retry", 1)
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
redis.call("HINCRBY", KEYS[5], "outcome:" .. ARGV[3], 1)
redis.call("HINCRBY", KEYS[5], ARGV[13], 1)
redis.call("HINCRBY", KEYS[5], "dispatch_ms_sum", ARGV[14])
if stage == "delivery_observed" then
  redis.call("HINCRBY", KEYS[5], "observed", 1)
end
redis.call("XADD", KEYS[3], "MAXLEN", "~", ARGV[7], "*", "type", "delivery",
  "data", cjson.encode({delivery_id = d[4], message_id = d[6], recipient = d[7],
    stage = stage, outcome = ARGV[3]}))
return 1
