-- update_agent: change fields of one agent's JSON and move its activity forward.
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
--
-- ARGV[1]  agent id
-- ARGV[2]  JSON object of fields to set ({} for none)
-- ARGV[3]  now in microseconds, a decimal string; "" leaves last_active_us alone
--
-- Returns the agent JSON after the change, or false if there is no such agent.

local raw = redis.call("HGET", KEYS[1], ARGV[1])
if not raw then return false end
local agent = cjson.decode(raw)
for k, v in pairs(cjson.decode(ARGV[2])) do
  agent[k] = v
end
if ARGV[3] ~= "" and tonumber(ARGV[3]) > tonumber(agent.last_active_us) then
  agent.last_active_us = ARGV[3]
end
local out = cjson.encode(agent)
redis.call("HSET", KEYS[1], ARGV[1], out)
return out
