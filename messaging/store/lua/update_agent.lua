-- update_agent: change fields of one agent's JSON and move its activity forward.
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
--
-- ARGV[1]  agent id
-- ARGV[2]  JSON object of fields to set ({} for none)
-- ARGV[3]  now in microseconds, a decimal string; "" leaves last_active_us alone
--
-- Returns the agent JSON after the change, or false if there is no such agent.

local agents_key = KEYS[1]
local agent_id = ARGV[1]
local fields_json = ARGV[2]
local now_us = ARGV[3]

local raw = redis.call("HGET", agents_key, agent_id)
if not raw then return false end
local agent = cjson.decode(raw)
for k, v in pairs(cjson.decode(fields_json)) do
  agent[k] = v
end
if now_us ~= "" and tonumber(now_us) > tonumber(agent.last_active_us) then
  agent.last_active_us = now_us
end
local out = cjson.encode(agent)
redis.call("HSET", agents_key, agent_id, out)
return out
