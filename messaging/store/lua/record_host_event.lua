-- record_host_event: the recipient's host says what it did with a delivery
-- (pushed it into the session, resumed the session for it); appended to the
-- delivery's host events, the oldest dropped past the cap. The first `pushed`
-- also sets `pushed_us`. Nothing here moves the delivery's stage.
--
-- KEYS[1]  dlv  hash  the delivery
--
-- ARGV[1]  the recipient agent's id (the caller's)
-- ARGV[2]  kind (pushed | resume_started | resume_ended | resume_failed)
-- ARGV[3]  detail ("" for none)
-- ARGV[4]  now, us (decimal string)
-- ARGV[5]  events kept, at most
--
-- Returns 1 when recorded, 0 when the delivery is gone or is not the caller's.

local dlv = KEYS[1]
local agent_id = ARGV[1]
local kind = ARGV[2]
local detail = ARGV[3]
local now_us = ARGV[4]
local kept = tonumber(ARGV[5])

if redis.call("HGET", dlv, "agent_id") ~= agent_id then return 0 end
local events = cjson.decode(redis.call("HGET", dlv, "host_events") or "[]")
local event = {kind = kind, us = now_us}
if detail ~= "" then event.detail = detail end
table.insert(events, event)
while #events > kept do table.remove(events, 1) end
redis.call("HSET", dlv, "host_events", cjson.encode(events))
if kind == "pushed" then
  redis.call("HSETNX", dlv, "pushed_us", now_us)
end
return 1
