-- change_token: rotate an agent's token, or retire or close the agent, in one
-- step: its status is checked and its live token hash swapped together, so no
-- mix of these calls leaves a retired or closed agent with a live token.
--
-- KEYS[1]  agents       hash    agent_id -> agent JSON
-- KEYS[2]  agent_token  string  the hash of the agent's live token
--
-- ARGV[1]  agent id
-- ARGV[2]  "rotate", "retired" or "closed"
-- ARGV[3]  rotate: the new token's hash (its scope record is written already)
--
-- Returns {outcome, old token hash or "", agent JSON}: outcome "ok", "inactive"
-- (rotate of a retired or closed agent: nothing changed) or "missing".

local agents_key = KEYS[1]
local token_key = KEYS[2]
local agent_id = ARGV[1]
local action = ARGV[2]
local new_token_hash = ARGV[3]

local raw = redis.call("HGET", agents_key, agent_id)
if not raw then return {"missing", "", ""} end
local agent = cjson.decode(raw)
if action == "rotate" then
  if agent.status ~= "active" then return {"inactive", "", raw} end
  local old = redis.call("SET", token_key, new_token_hash, "GET")
  return {"ok", old or "", raw}
end
-- closed is final: retiring a closed agent leaves it closed
if not (agent.status == "closed" and action == "retired") then
  agent.status = action
  raw = cjson.encode(agent)
  redis.call("HSET", agents_key, agent_id, raw)
end
local old = redis.call("GET", token_key)
redis.call("DEL", token_key)
return {"ok", old or "", raw}
