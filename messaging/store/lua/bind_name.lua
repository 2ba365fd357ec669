-- bind_name: the first agent of a name has registered; bind every delivery
-- waiting for that name, in admission order, by the rules of admission
-- (resolve_lib, with each sender's scope), stamp `target_selected`, pin it,
-- and put it in the outbox (or hold it, for an agent that holds its mail).
-- The name's authorization ends: from now on sends resolve the name itself.
-- uses: records_lib, resolve_lib
--
-- KEYS[1]  agents       hash  agent_id -> agent JSON
-- KEYS[2]  names        hash  name -> JSON list of agent ids
-- KEYS[3]  refs         hash  ref -> agent_id
-- KEYS[4]  allowed      hash  authorized names
-- KEYS[5]  allowed_due  zset  authorized names by expiry (ms)
-- KEYS[6]  waiting      zset  the name's waiting delivery ids by admission sequence
-- KEYS[7]  due          zset  delivery ids by due time (ms)
-- KEYS[8]  held         zset  held delivery ids by admission sequence
-- KEYS[9]  stats        hash  delivery counters
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

local a = cjson.decode(ARGV[1])
if redis.call("HEXISTS", KEYS[2], a.name) == 0 then return {"unregistered"} end
local given = {}
for _, did in ipairs(a.ids) do given[did] = true end
for _, did in ipairs(redis.call("ZRANGE", KEYS[6], 0, -1)) do
  if not given[did] then return {"retry"} end
end
redis.call("HDEL", KEYS[4], a.name)
redis.call("ZREM", KEYS[5], a.name)

local out = {"ok"}
for i, did in ipairs(a.ids) do
  local dlv, msg, events = KEYS[7 + 3 * i], KEYS[8 + 3 * i], KEYS[9 + 3 * i]
  local d = redis.call("HMGET", dlv, "target", "sender_id", "message_id", "outcome")
  redis.call("ZREM", KEYS[6], did)
  if d[1] == "pending" and not d[4] then
    local ctx = {agents = KEYS[1], names = KEYS[2], refs = KEYS[3], allowed = nil,
      sender = load_agent({agents = KEYS[1]}, d[2]), now_ms = "0"}
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
        redis.call("ZADD", KEYS[8], redis.call("HGET", msg, "seq"), did)
      else
        redis.call("ZADD", KEYS[7], a.due_ms, did)
        table.insert(out, did)
        table.insert(out, ag.transport.kind)
      end
      event.recipient, event.agent_id, event.stage = label, ag.id, "target_selected"
      event.target, event.held = "pinned", held
    else
      local why = "the name " .. a.name .. " reaches no agent that takes mail (" .. err .. ")"
      redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "failed",
        "error", why, "provider_result_recorded_us", a.now_us)
      redis.call("HINCRBY", KEYS[9], "outcome:failed", 1)
      event.recipient, event.stage, event.outcome, event.error = a.name,
        "provider_result_recorded", "failed", why
      event.target = "pending"
    end
    redis.call("XADD", events, "MAXLEN", "~", a.maxlen, "*", "type", "delivery",
      "data", cjson.encode(event))
  end
end
return out
