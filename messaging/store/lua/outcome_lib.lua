-- outcome_lib: ending a delivery's attempt, shared by every script that closes
-- one (record_outcomes, expire_lease; prepended, functions only). Field names
-- follow messaging/store/schema.py (DeliveryField).

-- The attempts JSON with its last attempt ended at now_us with `outcome` (and
-- `err`, unless "").
local function end_attempt(attempts_json, outcome, err, now_us)
  local attempts = cjson.decode(attempts_json)
  local last = attempts[#attempts]
  last.ended_us = now_us
  last.outcome = outcome
  if err ~= "" then last.error = err end
  return cjson.encode(attempts)
end

-- Close the delivery's last attempt with `outcome`, free its lease, and move a
-- `dispatch_started` delivery on to `provider_result_recorded`. Returns its
-- stage after.
local function close_attempt(dlv, attempts_json, stage, outcome, err, now_us)
  redis.call("HSET", dlv, "outcome", outcome, "provider_result_recorded_us", now_us,
    "lease_until_ms", 0, "attempts", end_attempt(attempts_json, outcome, err, now_us))
  if stage == "dispatch_started" then
    stage = "provider_result_recorded"
    redis.call("HSET", dlv, "stage", stage)
  end
  return stage
end

-- After close_attempt: take the delivery off the due set, count its outcome and
-- dispatch latency (and an observation when o.observed), and tell its sender's
-- events stream. Idle notices come from `courier`, which has no stream to tell.
-- o: {due, stats, events, events_cap, delivery_id, message_id, recipient,
-- sender_id, stage, outcome, latency_bucket, latency_ms, observed}
local function settle_outcome(o)
  redis.call("ZREM", o.due, o.delivery_id)
  redis.call("HINCRBY", o.stats, "outcome:" .. o.outcome, 1)
  redis.call("HINCRBY", o.stats, o.latency_bucket, 1)
  redis.call("HINCRBY", o.stats, "dispatch_ms_sum", o.latency_ms)
  if o.observed then
    redis.call("HINCRBY", o.stats, "observed", 1)
  end
  if o.sender_id ~= "courier" then
    redis.call("XADD", o.events, "MAXLEN", "~", o.events_cap, "*", "type", "delivery",
      "data", cjson.encode({delivery_id = o.delivery_id, message_id = o.message_id,
        recipient = o.recipient, stage = o.stage, outcome = o.outcome}))
  end
end
