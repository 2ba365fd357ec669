-- observe_deliveries: the recipient's side showed these deliveries; record
-- `delivery_observed` where the outcome is recorded and it is not yet seen.
--
-- KEYS[1]     agents  hash  agent_id -> agent JSON (the observer's activity)
-- KEYS[2..]   dlv     hash  one delivery each
--
-- ARGV[1]  observing agent id
-- ARGV[2]  now, us (decimal string)
--
-- Returns the number of deliveries newly observed.

local n = 0
for i = 2, #KEYS do
  local d = redis.call("HMGET", KEYS[i], "stage", "agent_id")
  if d[1] == "provider_result_recorded" and d[2] == ARGV[1] then
    redis.call("HSET", KEYS[i], "stage", "delivery_observed", "delivery_observed_us", ARGV[2])
    n = n + 1
  end
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
