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

local n = 0
for p = 0, (#KEYS - 2) / 2 - 1 do
  local dlv = KEYS[3 + 2 * p]
  local d = redis.call("HMGET", dlv, "stage", "agent_id", "outcome", "id", "message_id",
    "recipient", "sender_id")
  local shown = d[3] == "accepted" or (ARGV[4] == "1" and d[3] == "unknown")
  if d[1] == "provider_result_recorded" and d[2] == ARGV[1] and shown then
    redis.call("HSET", dlv, "stage", "delivery_observed", "delivery_observed_us", ARGV[2])
    if d[7] ~= "courier" then
      redis.call("XADD", KEYS[4 + 2 * p], "MAXLEN", "~", ARGV[3], "*", "type", "delivery",
        "data", cjson.encode({delivery_id = d[4], message_id = d[5], recipient = d[6],
          stage = "delivery_observed", outcome = d[3]}))
    end
    n = n + 1
  elseif d[1] == "dispatch_started" and d[2] == ARGV[1] and not d[3] then
    -- shown before its outcome was recorded (an inbox put is visible at once):
    -- recording `accepted` records the observation then (record_outcomes)
    redis.call("HSET", dlv, "seen_early", "1")
  end
end
if n > 0 then
  redis.call("HINCRBY", KEYS[2], "observed", n)
end
local raw = redis.call("HGET", KEYS[1], ARGV[1])
if raw then
  local agent = cjson.decode(raw)
  if tonumber(ARGV[2]) > tonumber(agent.last_active_us) then
    agent.last_active_us = ARGV[2]
    redis.call("HSET", KEYS[1], ARGV[1], cjson.encode(agent))
  end
end
return n
