-- resolve_lib: which agent a recipient string reaches. The one copy of
-- Courier's recipient resolution, prepended to every script that resolves
-- (admit_message, resolve_target). It defines functions only and touches only
-- the keys its caller passes in `ctx`. Record fields: messaging/store/schema.py.
--
-- resolve_recipient(ctx, s) -> agent, nil | nil, reason [, authorization]
--   ctx  {agents, names, refs: keys of the project's agents hash, name ->
--        JSON list of agent ids, ref -> agent id; allowed: the authorized
--        names hash (nil: pending targets are not offered); sender: the
--        sending agent's record (nil: no scope, no `main`); now_ms}
--   s    `agt_...` (exact), `Name [ref]` (exact), a reserved name, or a bare name
--   reason  "not_found" | "retired" | "closed" | "bound_source_lost" | "no_main"
--           | "pending" (an authorized name no agent has registered: the third
--           value is its authorization {expires_ms})
--           | "ambiguous" (ctx.refuse_ties only: the third value is the tied
--           agents' records, in registration order)
--
-- A bare name reaches, among the project's active agents of that name:
--   1. scope: an agent of the sender's session tree (same root of the parent
--      chain) over the rest;
--   2. presence: busy, idle or unknown over exited over source_lost;
--   3. most recent use (used_us: registration, busy/idle reports, sends).
-- Two agents equal on all three (the same microsecond of use) are a tie the
-- rules cannot break: with ctx.refuse_ties the name is ambiguous and the sender
-- must name one as `Name [ref]`; without it (binding an authorized name's
-- waiting mail) the first registered of them is taken.
-- The chosen agent is then checked: source_lost fails the recipient.

local function load_agent(ctx, id)
  if not id then return nil end
  local raw = redis.call("HGET", ctx.agents, id)
  if raw then return cjson.decode(raw) end
  return nil
end

local PRESENCE_RANK = {busy = 2, idle = 2, exited = 1, source_lost = 0}

local function presence_rank(ag)
  local r = PRESENCE_RANK[ag.presence]
  if r == nil then return 2 end -- unknown: no report yet
  return r
end

local function used_us(ag)
  return tonumber(ag.used_us or ag.registered_us or ag.last_active_us or "0")
end

local function root_of(ag)
  if type(ag.root) == "string" then return ag.root end
  return ag.id
end

-- 1 when agent a wins over agent b for a sender of session root `scope`, -1
-- when b wins, 0 when they tie.
local function rank_order(a, b, scope)
  local sa, sb = root_of(a) == scope, root_of(b) == scope
  if sa ~= sb then return sa and 1 or -1 end
  local ra, rb = presence_rank(a), presence_rank(b)
  if ra ~= rb then return ra > rb and 1 or -1 end
  local ua, ub = used_us(a), used_us(b)
  if ua ~= ub then return ua > ub and 1 or -1 end
  return 0
end

local function by_name(ctx, name)
  local ids_raw = redis.call("HGET", ctx.names, name)
  if not ids_raw then
    if ctx.allowed then
      local auth = redis.call("HGET", ctx.allowed, name)
      if auth then
        local a = cjson.decode(auth)
        if tonumber(a.expires_ms) > tonumber(ctx.now_ms) then return nil, "pending", a end
      end
    end
    return nil, "not_found"
  end
  local scope = nil
  if ctx.sender then scope = root_of(ctx.sender) end
  local best, tied, retired, closed = nil, {}, false, false
  for _, id in ipairs(cjson.decode(ids_raw)) do
    local ag = load_agent(ctx, id)
    if ag then
      if ag.status == "active" then
        local order = best and rank_order(ag, best, scope) or 1
        if order > 0 then best, tied = ag, {}
        elseif order == 0 then table.insert(tied, ag) end
      elseif ag.status == "retired" then retired = true
      elseif ag.status == "closed" then closed = true end
    end
  end
  if best and #tied > 0 and ctx.refuse_ties then
    table.insert(tied, 1, best)
    return nil, "ambiguous", tied
  end
  if best then return best, nil end
  if retired then return nil, "retired" end
  if closed then return nil, "closed" end
  return nil, "not_found"
end

-- Reserved recipients, resolved by rule instead of by name. Each returns an
-- agent (then checked like any other) or nil and a reason. A recipient that
-- is not an agent (the project's human side) is added here as its own kind.
local RESERVED = {}
-- The project's human: a record without a ref in the agents hash, written when
-- the project is created (messaging/service/human.py); its mail goes to the
-- project's human inbox.
RESERVED["human"] = function(ctx)
  local human = load_agent(ctx, "human")
  if not human then return nil, "not_found" end
  return human, nil
end
RESERVED["main"] = function(ctx)
  local sender = ctx.sender
  if not sender or type(sender.parent) ~= "string" then return nil, "no_main" end
  local root = load_agent(ctx, root_of(sender))
  if not root then return nil, "not_found" end
  return root, nil
end

local function resolve_recipient(ctx, s)
  local ag
  if string.sub(s, 1, 4) == "agt_" then
    ag = load_agent(ctx, s)
  else
    local name, ref = string.match(s, "^(.-) %[(%x%x%x%x%x%x)%]$")
    if name then
      ag = load_agent(ctx, redis.call("HGET", ctx.refs, ref))
      if ag and ag.name ~= name then ag = nil end
    else
      local err, auth
      if RESERVED[s] then
        ag, err = RESERVED[s](ctx)
      else
        ag, err, auth = by_name(ctx, s)
      end
      if not ag then return nil, err, auth end
    end
  end
  if not ag then return nil, "not_found" end
  if ag.status == "retired" or ag.status == "closed" then return nil, ag.status end
  if ag.presence == "source_lost" then return nil, "bound_source_lost" end
  return ag, nil
end
