-- bind_name: the first agent of a name has registered; bind every delivery
-- waiting for that name, in admission order, by the rules of admission
-- (resolve_lib, with each sender's scope), stamp `target_selected`, pin it,
-- and put it in the outbox (or hold it, for an agent that holds its mail).
-- The name's authorization ends: from now on sends resolve the name itself.
-- uses: records_lib, resolve_lib, names_lib
--
-- KEYS[1]  agents       hash  agent_id -> agent JSON
-- KEYS[2]  names        hash  name -> JSON list of agent ids
-- KEYS[3]  refs         hash  ref -> agent_id
-- KEYS[4..7]  the name's keys, named n.<name> by name_keys (names_lib):
--   KEYS[4]  allowed      hash  authorized names
--   KEYS[5]  allowed_due  zset  authorized names by expiry (ms)
--   KEYS[6]  waiting      zset  the name's waiting delivery ids by admission sequence
--   KEYS[7]  stats        hash  delivery counters
-- KEYS[8]  due          zset  delivery ids by due time (ms)
-- KEYS[9]  held         zset  held delivery ids by admission sequence
-- KEYS[10..] three per waiting delivery, in the order of ARGV ids: its dlv
--            hash, its message hash, its sender's events stream
--
-- ARGV[1]  JSON {name, now_us, due_ms, maxlen, ids: the waiting delivery ids
--          the caller read, oldest first}
--
-- Records: messaging/store/schema.py. A delivery whose name now reaches no
-- agent that takes mail (retired, closed, source lost) ends `failed`.
-- Returns {"unregistered"} when no agent has the name (nothing written),
-- {"retry"} when a delivery the caller did not read is waiting (nothing
-- written), else {"ok", then per delivery put in the outbox: id, transport}.

local agents_key = KEYS[1]
local names_key = KEYS[2]
local refs_key = KEYS[3]
local n = name_keys(KEYS, 4)
local due_key = KEYS[8]
local held_key = KEYS[9]
local args_json = ARGV[1]

local a = cjson.decode(args_json)
local waiting_keys = key_groups(KEYS, 10, #a.ids, {"dlv", "msg", "events"})
if redis.call("HEXISTS", names_key, a.name) == 0 then return {"unregistered"} end
if not waiting_as_read(n, a.ids) then return {"retry"} end
end_authorization(n, a.name)

local out = {"ok"}
for i, did in ipairs(a.ids) do
  local dlv, msg, events = waiting_keys[i].dlv, waiting_keys[i].msg, waiting_keys[i].events
  local d = redis.call("HMGET", dlv, "target", "sender_id", "message_id", "outcome")
  redis.call("ZREM", n.waiting, did)
  if d[1] == "pending" and not d[4] then
    local ctx = {agents = agents_key, names = names_key, refs = refs_key, allowed = nil,
      sender = load_agent({agents = agents_key}, d[2]), now_ms = "0"}
    local ag, err = resolve_recipient(ctx, a.name)
    local event = {delivery_id = did, message_id = d[3]}
    if ag then
      local label = agent_label(ag)
      local held = ag.inbound == "hold" and ag.id ~= d[2]
      redis.call("HSET", dlv, "agent_id", ag.id, "recipient", label,
        "transport", ag.transport.kind, "stage", "target_selected", "target", "pinned",
        "target_selected_us", a.now_us, "held", held and 1 or 0)
      local m = redis.call("HMGET", msg, "deliveries", "resolved", "withheld")
      local pairs_ = cjson.decode(m[1])
      for _, p in ipairs(pairs_) do
        if p[1] == did then p[2] = ag.id end
      end
      redis.call("HSET", msg, "deliveries", cjson.encode(pairs_))
      if m[2] then
        local resolved = cjson.decode(m[2])
        if resolved[a.name] == "" then resolved[a.name] = ag.id end
        redis.call("HSET", msg, "resolved", cjson.encode(resolved))
      end
      if held then
        local withheld = {}
        if m[3] then withheld = cjson.decode(m[3]) end
        table.insert(withheld, ag.id)
        redis.call("HSET", msg, "withheld", cjson.encode(withheld))
        redis.call("ZADD", held_key, redis.call("HGET", msg, "seq"), did)
      else
        redis.call("ZADD", due_key, a.due_ms, did)
        table.insert(out, did)
        table.insert(out, ag.transport.kind)
      end
      event.recipient, event.agent_id, event.stage = label, ag.id, "target_selected"
      event.target, event.held = "pinned", held
    else
      local why = "the name " .. a.name .. " reaches no agent that takes mail (" .. err .. ")"
      redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "failed",
        "error", why, "provider_result_recorded_us", a.now_us)
      redis.call("HINCRBY", n.stats, "outcome:failed", 1)
      event.recipient, event.stage, event.outcome, event.error = a.name,
        "provider_result_recorded", "failed", why
      event.target = "pending"
    end
    redis.call("XADD", events, "MAXLEN", "~", a.maxlen, "*", "type", "delivery",
      "data", cjson.encode(event))
  end
end
return out
