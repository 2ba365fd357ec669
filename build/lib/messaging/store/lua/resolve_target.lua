-- resolve_target: the agent a subscription's target string names, read only,
-- by the rules of admission (admit_message.lua): an agent id or `Name [ref]`
-- exactly; a bare name to the live agent of that name with the newest
-- activity. Status and presence are checked by subscribe.lua.
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
-- KEYS[2]  names   hash  name -> JSON list of agent ids
-- KEYS[3]  refs    hash  ref -> agent_id
--
-- ARGV[1]  the target string
--
-- Returns {"ok", agent JSON} or {"no", reason}: reason "not_found",
-- "retired" or "closed".

local function load(agent_id)
  return redis.call("HGET", KEYS[1], agent_id)
end

local s = ARGV[1]
if string.sub(s, 1, 4) == "agt_" then
  local raw = load(s)
  if raw then return {"ok", raw} end
  return {"no", "not_found"}
end

local name, ref = string.match(s, "^(.-) %[(%x%x%x%x%x%x)%]$")
if name then
  local id = redis.call("HGET", KEYS[3], ref)
  local raw = id and load(id)
  if raw and cjson.decode(raw).name == name then return {"ok", raw} end
  return {"no", "not_found"}
end

local ids_raw = redis.call("HGET", KEYS[2], s)
if not ids_raw then return {"no", "not_found"} end
local best, best_raw, retired, closed = nil, nil, false, false
for _, id in ipairs(cjson.decode(ids_raw)) do
  local raw = load(id)
  if raw then
    local ag = cjson.decode(raw)
    if ag.status == "active" then
      if best == nil or tonumber(ag.last_active_us) > tonumber(best.last_active_us) then
        best, best_raw = ag, raw
      end
    elseif ag.status == "retired" then retired = true
    elseif ag.status == "closed" then closed = true end
  end
end
if best_raw then return {"ok", best_raw} end
if retired then return {"no", "retired"} end
if closed then return {"no", "closed"} end
return {"no", "not_found"}
