-- resolve_target: the agent a subscription's target string reaches, read
-- only, by the rules of admission (resolve_lib). Status and presence are
-- checked again by subscribe.lua; a name no agent has registered is not found.
-- uses: records_lib, resolve_lib
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
-- KEYS[2]  names   hash  name -> JSON list of agent ids
-- KEYS[3]  refs    hash  ref -> agent_id
--
-- ARGV[1]  the target string
-- ARGV[2]  the subscriber's agent id (its session tree scopes the name)
--
-- Returns {"ok", agent JSON} or {"no", reason}: reason "not_found",
-- "retired", "closed", "bound_source_lost" or "no_main"; or {"no", "ambiguous",
-- JSON list of the tied agents' `Name [ref]` labels}.

local agents_key = KEYS[1]
local names_key = KEYS[2]
local refs_key = KEYS[3]
local target = ARGV[1]
local subscriber_id = ARGV[2]

local ctx = {agents = agents_key, names = names_key, refs = refs_key, allowed = nil,
  sender = load_agent({agents = agents_key}, subscriber_id), now_ms = "0", refuse_ties = true}
local ag, err, tied = resolve_recipient(ctx, target)
if ag then return {"ok", cjson.encode(ag)} end
if err == "ambiguous" then
  local candidates = {}
  for _, t in ipairs(tied) do table.insert(candidates, agent_label(t)) end
  return {"no", err, cjson.encode(candidates)}
end
return {"no", err}
