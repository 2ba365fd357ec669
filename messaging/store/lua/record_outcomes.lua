-- record_outcomes: the transport's answer for each leased delivery, each
-- recorded only under its holder's fencing token. A retry frees the lease and
-- sets when the delivery is due again; its stage does not change.
--
-- KEYS[1]     due     zset    delivery ids by due time (ms)
-- KEYS[2]     agents  hash    agent_id -> agent JSON (the endpoint's health)
-- KEYS[3]     stats   hash    delivery counters
-- KEYS[4..]   two per delivery: its dlv hash, its sender's events stream
--
-- ARGV[1]  now, us (decimal string)
-- ARGV[2]  events stream cap (approximate MAXLEN)
-- ARGV[3]  failures in a row that, lasting ARGV[4] ms or more, make an
--          endpoint unhealthy; ARGV[5] ms: how long it is then held before
--          the next attempt probes it; ARGV[6] now, ms
-- ARGV[7..] eight per delivery, in order:
--          fencing token;
--          "accepted" | "rejected" | "failed" | "unknown" | "retry";
--          retry due time, ms ("retry" only);
--          error text for the attempt ("" for none);
--          "1" when the recipient's side already showed it (delivery_observed);
--          what the attempt says of the endpoint: "ok" (it answered), "down"
--          (no answer, or 408/429/5xx), "" (nothing known);
--          the stats field of its dispatch latency bucket; that latency, ms
--
-- An unhealthy endpoint's deliveries wait (lease_deliveries skips them) until
-- the hold ends; one attempt then probes it, and an answer makes it healthy.
--
-- Idle notices come from `courier`, which has no event stream to tell.
--
-- Returns one flag per delivery: 1 recorded, 0 stale token or nothing leased.

local now_ms = tonumber(ARGV[6])

local function endpoint_health(dlv, signal)
  if signal == "" then return end
  local id = redis.call("HGET", dlv, "agent_id")
  local raw = redis.call("HGET", KEYS[2], id)
  if not raw then return end
  local agent = cjson.decode(raw)
  local ep = agent.endpoint
  if type(ep) ~= "table" then ep = {failures = 0} end
  if signal == "ok" then
    if ep.failures == 0 and not ep.hold_until_ms then return end
    ep = {failures = 0}
  else
    ep.failures = ep.failures + 1
    ep.failing_since_ms = ep.failing_since_ms or ARGV[6]
    if ep.failures >= tonumber(ARGV[3])
        and now_ms - tonumber(ep.failing_since_ms) >= tonumber(ARGV[4]) then
      ep.hold_until_ms = string.format("%d", now_ms + tonumber(ARGV[5]))
    end
  end
  agent.endpoint = ep
  redis.call("HSET", KEYS[2], id, cjson.encode(agent))
end

local function record(dlv, events, a)
  local fence, kind, retry_at, err, displayed, signal, bucket, latency =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
    ARGV[a + 7]
  local d = redis.call("HMGET", dlv, "fence", "lease_until_ms", "attempts", "id", "stage",
    "message_id", "recipient", "sender_id", "seen_early")
  if d[1] ~= fence or not d[2] or d[2] == "0" then
    return 0
  end
  endpoint_health(dlv, signal)
  local attempts = cjson.decode(d[3])
  local last = attempts[#attempts]
  last.ended_us = ARGV[1]
  last.outcome = kind
  if err ~= "" then last.error = err end
  if kind == "retry" then
    redis.call("HINCRBY", KEYS[3], "retry", 1)
    redis.call("HSET", dlv, "lease_until_ms", 0, "retry_at_ms", retry_at,
      "attempts", cjson.encode(attempts))
    redis.call("ZADD", KEYS[1], retry_at, d[4])
    return 1
  end
  redis.call("HSET", dlv, "outcome", kind, "provider_result_recorded_us", ARGV[1],
    "lease_until_ms", 0, "attempts", cjson.encode(attempts))
  local stage = d[5]
  if stage == "dispatch_started" then
    stage = "provider_result_recorded"
    redis.call("HSET", dlv, "stage", stage)
  end
  if d[9] then
    -- the recipient's side showed it before this outcome was recorded
    redis.call("HDEL", dlv, "seen_early")
    if kind == "accepted" then displayed = "1" end
  end
  if displayed == "1" and kind == "accepted" and stage ~= "delivery_observed" then
    stage = "delivery_observed"
    redis.call("HSET", dlv, "stage", stage, "delivery_observed_us", ARGV[1])
  end
  redis.call("ZREM", KEYS[1], d[4])
  redis.call("HINCRBY", KEYS[3], "outcome:" .. kind, 1)
  redis.call("HINCRBY", KEYS[3], bucket, 1)
  redis.call("HINCRBY", KEYS[3], "dispatch_ms_sum", latency)
  if stage == "delivery_observed" then
    redis.call("HINCRBY", KEYS[3], "observed", 1)
  end
  if d[8] ~= "courier" then
    redis.call("XADD", events, "MAXLEN", "~", ARGV[2], "*", "type", "delivery",
      "data", cjson.encode({delivery_id = d[4], message_id = d[6], recipient = d[7],
        stage = stage, outcome = kind}))
  end
  return 1
end

local out = {}
for p = 0, (#KEYS - 3) / 2 - 1 do
  out[p + 1] = record(KEYS[4 + 2 * p], KEYS[5 + 2 * p], 7 + 8 * p)
end
return out
