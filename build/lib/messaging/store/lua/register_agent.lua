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

if redis.call("HEXISTS", KEYS[3], ARGV[3]) == 1 then
  return 0
end
local ids = {}
local raw = redis.call("HGET", KEYS[2], ARGV[2])
if raw then ids = cjson.decode(raw) end
table.insert(ids, ARGV[1])
redis.call("HSET", KEYS[2], ARGV[2], cjson.encode(ids))
redis.call("HSET", KEYS[3], ARGV[3], ARGV[1])
redis.call("HSET", KEYS[1], ARGV[1], ARGV[4])
return 1
