-- release_held: the project's human releases a held delivery (it goes to
-- the outbox and is dispatched as usual) or declines it (outcome `rejected`,
-- never dispatched, never shown to the recipient). Either way it is no
-- longer held, and its sender hears of it.
--
-- KEYS[1]  held    zset    held delivery ids by admission sequence
-- KEYS[2]  due     zset    delivery ids by due time (ms)
-- KEYS[3]  dlv     hash    the delivery
-- KEYS[4]  msg     hash    its message (the recipients it is withheld from)
-- KEYS[5]  events  stream  the sender's events
-- KEYS[6]  stats   hash    delivery counters
--
-- ARGV[1]  "release" | "decline"
-- ARGV[2]  now, us (decimal string)
-- ARGV[3]  the outbox due time, ms (decimal string)
-- ARGV[4]  the error recorded by a decline
-- ARGV[5]  events stream cap (approximate MAXLEN)
--
-- Records: messaging/store/schema.py.
-- Returns {"not_held"} (missing, or released or declined already), else
-- {"released", transport} or {"declined"}.

local held_key = KEYS[1]
local due_key = KEYS[2]
local dlv = KEYS[3]
local msg = KEYS[4]
local events_key = KEYS[5]
local stats_key = KEYS[6]
local action = ARGV[1]
local now_us = ARGV[2]
local outbox_due_ms = ARGV[3]
local decline_error = ARGV[4]
local events_cap = ARGV[5]

local d = redis.call("HMGET", dlv, "held", "id", "agent_id", "message_id", "recipient",
  "transport", "sender_id")
if d[1] ~= "1" then return {"not_held"} end
local did, agent_id = d[2], d[3]
redis.call("HSET", dlv, "held", 0)
redis.call("ZREM", held_key, did)
local event = {delivery_id = did, message_id = d[4], recipient = d[5], agent_id = agent_id,
  held = false}
local answer
if action == "release" then
  local raw = redis.call("HGET", msg, "withheld")
  if raw then
    local kept = {}
    for _, id in ipairs(cjson.decode(raw)) do
      if id ~= agent_id then table.insert(kept, id) end
    end
    redis.call("HSET", msg, "withheld", cjson.encode(kept))
  end
  redis.call("ZADD", due_key, outbox_due_ms, did)
  event.stage, event.released = "target_selected", true
  answer = {"released", d[6]}
else
  redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "rejected",
    "error", decline_error, "declined", 1, "provider_result_recorded_us", now_us)
  redis.call("HINCRBY", stats_key, "outcome:rejected", 1)
  event.stage, event.outcome, event.error = "provider_result_recorded", "rejected", decline_error
  answer = {"declined"}
end
if d[7] ~= "courier" then -- an idle notice's sender has no stream
  redis.call("XADD", events_key, "MAXLEN", "~", events_cap, "*", "type", "delivery",
    "data", cjson.encode(event))
end
return answer
