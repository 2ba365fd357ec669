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

local raw = redis.call("HGET", KEYS[1], ARGV[1])
if not raw then return {"missing", "", ""} end
local agent = cjson.decode(raw)
if ARGV[2] == "rotate" then
  if agent.status ~= "active" then return {"inactive", "", raw} end
  local old = redis.call("SET", KEYS[2], ARGV[3], "GET")
  return {"ok", old or "", raw}
end
-- closed is final: retiring a closed agent leaves it closed
if not (agent.status == "closed" and ARGV[2] == "retired") then
  agent.status = ARGV[2]
  raw = cjson.encode(agent)
  redis.call("HSET", KEYS[1], ARGV[1], raw)
end
local old = redis.call("GET", KEYS[2])
redis.call("DEL", KEYS[2])
return {"ok", old or "", raw}
