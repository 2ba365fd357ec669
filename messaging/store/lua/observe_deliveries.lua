-- observe_deliveries: the recipient's side showed these deliveries; record
-- `delivery_observed` where the outcome is `accepted` (or, when the host says so
-- itself, `unknown`: the outcome stays `unknown`) and it is not yet seen, and
-- tell each sender (a `delivery` event).
--
-- KEYS[1]     agents  hash    agent_id -> agent JSON (the observer's activity)
-- KEYS[2]     stats   hash    delivery counters
-- KEYS[3..]   two per delivery: its dlv hash, the sender's events stream
--
-- ARGV[1]  observing agent id
-- ARGV[2]  now, us (decimal string)
-- ARGV[3]  events stream cap (approximate MAXLEN)
-- ARGV[4]  "1" when the recipient's host confirmed display itself (also after `unknown`)
--
-- Idle notices come from `courier`, which has no event stream to tell.
--
-- A delivery shown before its outcome was recorded gets `seen_early` (see
-- record_outcomes). Returns the number of deliveries newly observed.

local agents_key = KEYS[1]
local stats_key = KEYS[2]
local observer_id = ARGV[1]
local now_us = ARGV[2]
local events_cap = ARGV[3]
local host_confirmed = ARGV[4]

-- Each delivery's keys, by name.
local deliveries = {}
for p = 0, (#KEYS - 2) / 2 - 1 do
  deliveries[p + 1] = {dlv = KEYS[3 + 2 * p], events = KEYS[4 + 2 * p]}
end

local n = 0
for _, r in ipairs(deliveries) do
  local dlv = r.dlv
  local d = redis.call("HMGET", dlv, "stage", "agent_id", "outcome", "id", "message_id",
    "recipient", "sender_id")
  local shown = d[3] == "accepted" or (host_confirmed == "1" and d[3] == "unknown")
  if d[1] == "provider_result_recorded" and d[2] == observer_id and shown then
    redis.call("HSET", dlv, "stage", "delivery_observed", "delivery_observed_us", now_us)
    if d[7] ~= "courier" then
      redis.call("XADD", r.events, "MAXLEN", "~", events_cap, "*", "type", "delivery",
        "data", cjson.encode({delivery_id = d[4], message_id = d[5], recipient = d[6],
          stage = "delivery_observed", outcome = d[3]}))
    end
    n = n + 1
  elseif d[1] == "dispatch_started" and d[2] == observer_id and not d[3] then
    -- shown before its outcome was recorded (an inbox put is visible at once):
    -- recording `accepted` records the observation then (record_outcomes)
    redis.call("HSET", dlv, "seen_early", "1")
  end
end
if n > 0 then
  redis.call("HINCRBY", stats_key, "observed", n)
end
local raw = redis.call("HGET", agents_key, observer_id)
if raw then
  local agent = cjson.decode(raw)
  if tonumber(now_us) > tonumber(agent.last_active_us) then
    agent.last_active_us = now_us
    redis.call("HSET", agents_key, observer_id, cjson.encode(agent))
  end
end
return n
