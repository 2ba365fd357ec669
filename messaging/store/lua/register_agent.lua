-- register_agent: add an agent under a fresh ref; its name may already exist.
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
-- KEYS[2]  names   hash  name -> JSON list of agent ids
-- KEYS[3]  refs    hash  ref -> agent_id
--
-- ARGV[1]  agent id
-- ARGV[2]  agent name
-- ARGV[3]  ref (6 hex digits)
-- ARGV[4]  agent JSON
--
-- Returns 1 when registered, 0 when the ref is taken (pick another and retry).

local agents_key = KEYS[1]
local names_key = KEYS[2]
local refs_key = KEYS[3]
local agent_id = ARGV[1]
local agent_name = ARGV[2]
local ref = ARGV[3]
local agent_json = ARGV[4]

if redis.call("HEXISTS", refs_key, ref) == 1 then
  return 0
end
local ids = {}
local raw = redis.call("HGET", names_key, agent_name)
if raw then ids = cjson.decode(raw) end
table.insert(ids, agent_id)
redis.call("HSET", names_key, agent_name, cjson.encode(ids))
redis.call("HSET", refs_key, ref, agent_id)
redis.call("HSET", agents_key, agent_id, agent_json)
return 1
