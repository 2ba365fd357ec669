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

local d = redis.call("HMGET", KEYS[3], "held", "id", "agent_id", "message_id", "recipient",
  "transport", "sender_id")
if d[1] ~= "1" then return {"not_held"} end
local did, agent_id = d[2], d[3]
redis.call("HSET", KEYS[3], "held", 0)
redis.call("ZREM", KEYS[1], did)
local event = {delivery_id = did, message_id = d[4], recipient = d[5], agent_id = agent_id,
  held = false}
local answer
if ARGV[1] == "release" then
  local raw = redis.call("HGET", KEYS[4], "withheld")
  if raw then
    local kept = {}
    for _, id in ipairs(cjson.decode(raw)) do
      if id ~= agent_id then table.insert(kept, id) end
    end
    redis.call("HSET", KEYS[4], "withheld", cjson.encode(kept))
  end
  redis.call("ZADD", KEYS[2], ARGV[3], did)
  event.stage, event.released = "target_selected", true
  answer = {"released", d[6]}
else
  redis.call("HSET", KEYS[3], "stage", "provider_result_recorded", "outcome", "rejected",
    "error", ARGV[4], "declined", 1, "provider_result_recorded_us", ARGV[2])
  redis.call("HINCRBY", KEYS[6], "outcome:rejected", 1)
  event.stage, event.outcome, event.error = "provider_result_recorded", "rejected", ARGV[4]
  answer = {"declined"}
end
if d[7] ~= "courier" then -- an idle notice's sender has no stream
  redis.call("XADD", KEYS[5], "MAXLEN", "~", ARGV[5], "*", "type", "delivery",
    "data", cjson.encode(event))
end
return answer
