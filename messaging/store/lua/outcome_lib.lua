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

-- Close the delivery's last attempt with `outcome` and free its lease, in one
-- write: a `dispatch_started` delivery moves on to `provider_result_recorded`,
-- and on to `delivery_observed` when `observe` (the recipient's side showed
-- it). Returns its stage after.
local function close_attempt(dlv, attempts_json, stage, outcome, err, now_us, observe)
  local fields = {"outcome", outcome, "provider_result_recorded_us", now_us,
    "lease_until_ms", 0, "attempts", end_attempt(attempts_json, outcome, err, now_us)}
  local after = stage
  if stage == "dispatch_started" then after = "provider_result_recorded" end
  if observe and after ~= "delivery_observed" then
    after = "delivery_observed"
    table.insert(fields, "delivery_observed_us")
    table.insert(fields, now_us)
  end
  if after ~= stage then
    table.insert(fields, "stage")
    table.insert(fields, after)
  end
  redis.call("HSET", dlv, unpack(fields))
  return after
end

-- Counters of one script call, added to the stats hash once at its end
-- (`add_counts`): fields in the order first counted.
local function new_counts()
  return {order = {}, n = {}}
end

local function count(counts, field, n)
  if counts.n[field] == nil then
    table.insert(counts.order, field)
    counts.n[field] = 0
  end
  counts.n[field] = counts.n[field] + n
end

local function add_counts(stats, counts)
  for _, field in ipairs(counts.order) do
    redis.call("HINCRBY", stats, field, counts.n[field])
  end
end

-- A delivery's dispatch latency, ms, from its admission (admitted_us, the
-- admitting host's stamp) to now (the store's clock, us), and the stats field
-- of its bucket. bounds: the buckets' upper bounds, ms, space-separated and
-- ascending, the last one `inf`.
local function dispatch_latency(bounds, admitted_us, now)
  local ms = math.max(0, math.floor((now - (tonumber(admitted_us) or 0)) / 1000))
  local last = "inf"
  for bound in string.gmatch(bounds, "%S+") do
    last = bound
    local limit = tonumber(bound)
    if limit == nil or ms <= limit then break end
  end
  return "dispatch_ms_le:" .. last, ms
end

-- After close_attempt: take the delivery off the due set, count its outcome and
-- dispatch latency (and an observation when o.observed) in o.counts, and tell
-- its sender's events stream. Idle notices come from `courier`, which has no
-- stream to tell.
-- o: {due, counts, events, events_cap, delivery_id, message_id, recipient,
-- sender_id, stage, outcome, latency_bounds, admitted_us, now (the store's
-- time, us, a number), observed}
local function settle_outcome(o)
  redis.call("ZREM", o.due, o.delivery_id)
  count(o.counts, "outcome:" .. o.outcome, 1)
  local bucket, latency_ms = dispatch_latency(o.latency_bounds, o.admitted_us, o.now)
  count(o.counts, bucket, 1)
  count(o.counts, "dispatch_ms_sum", latency_ms)
  if o.observed then
    count(o.counts, "observed", 1)
  end
  if o.sender_id ~= "courier" then
    redis.call("XADD", o.events, "MAXLEN", "~", o.events_cap, "*", "type", "delivery",
      "data", cjson.encode({delivery_id = o.delivery_id, message_id = o.message_id,
        recipient = o.recipient, stage = o.stage, outcome = o.outcome}))
  end
end
