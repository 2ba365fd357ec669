-- resolve_target: the agent a subscription's target string reaches, read
-- only, by the rules of admission (resolve_lib). Status and presence are
-- checked again by subscribe.lua; a name no agent has registered is not found.
-- uses: resolve_lib
--
-- KEYS[1]  agents  hash  agent_id -> agent JSON
-- KEYS[2]  names   hash  name -> JSON list of agent ids
-- KEYS[3]  refs    hash  ref -> agent_id
--
-- ARGV[1]  the target string
-- ARGV[2]  the subscriber's agent id (its session tree scopes the name)
--
-- Returns {"ok", agent JSON} or {"no", reason}: reason "not_found",
-- "retired", "closed", "bound_source_lost" or "no_main".

local ctx = {agents = KEYS[1], names = KEYS[2], refs = KEYS[3], allowed = nil,
  sender = load_agent({agents = KEYS[1]}, ARGV[2]), now_ms = "0"}
local ag, err = resolve_recipient(ctx, ARGV[1])
if ag then return {"ok", cjson.encode(ag)} end
return {"no", err}
