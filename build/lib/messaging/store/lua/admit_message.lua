-- admit_message: idempotency check, recipient resolution and, only if all of
-- it passes, every write of one send. Any failure writes nothing.
--
-- KEYS[1]  agents   hash   agent_id -> agent JSON
-- KEYS[2]  names    hash   name -> JSON list of agent ids
-- KEYS[3]  refs     hash   ref -> agent_id
-- KEYS[4]  seq      string project sequence
-- KEYS[5]  msg      hash   the message to create
-- KEYS[6]  thread   zset   message ids of its thread
-- KEYS[7]  due      zset   delivery ids by due time (ms)
-- KEYS[8]  idem     string idempotency record (ignored when ARGV idem_fp is "")
-- KEYS[9..8+n]  dlv hashes, one per recipient string, used in order for each
--               distinct agent
-- KEYS[#KEYS]   retention  zset  stored message ids by when retention looks at them
--
-- Times travel as decimal strings: Lua numbers print with 14 digits only.
-- ARGV[1]  JSON {sender_id, now_us, due_ms, idem_fp, idem_ttl_s, thread_id,
--          message_id, policy ("wake"|"quiet"|"auto"), quiet_invalid (bool),
--          recipients [{s}], delivery_ids [..], has_bcc (bool)}
-- ARGV[2]  the message JSON, stored byte for byte
--
-- Returns a JSON string, one of:
--   {"status":"ok","policy":p,"observations":[..],"created_us":n}
--   {"status":"replay","message_id":id,"observations":[..]}
--   {"status":"conflict"}
--   {"status":"sender_gone"}
--   {"status":"recipients","failures":[{"to","reason"}]}
--   {"status":"quiet_not_allowed"}

local a = cjson.decode(ARGV[1])

if a.idem_fp ~= "" then
  local rec = redis.call("GET", KEYS[8])
  if rec then
    local r = cjson.decode(rec)
    if r.fp == a.idem_fp then
      return cjson.encode({status = "replay", message_id = r.message_id,
        observations = r.observations})
    end
    return cjson.encode({status = "conflict"})
  end
end

local sender_raw = redis.call("HGET", KEYS[1], a.sender_id)
if not sender_raw then
  return cjson.encode({status = "sender_gone"})
end

local function load(agent_id)
  local raw = redis.call("HGET", KEYS[1], agent_id)
  if raw then return cjson.decode(raw) end
  return nil
end

-- A bare name: the live agent with the newest activity; else why none is live.
local function by_name(name)
  local ids_raw = redis.call("HGET", KEYS[2], name)
  if not ids_raw then return nil, "not_found" end
  local best, retired, closed = nil, false, false
  for _, id in ipairs(cjson.decode(ids_raw)) do
    local ag = load(id)
    if ag then
      if ag.status == "active" then
        if best == nil or tonumber(ag.last_active_us) > tonumber(best.last_active_us) then
          best = ag
        end
      elseif ag.status == "retired" then retired = true
      elseif ag.status == "closed" then closed = true end
    end
  end
  if best then return best, nil end
  if retired then return nil, "retired" end
  if closed then return nil, "closed" end
  return nil, "not_found"
end

local function resolve(s)
  local ag
  if string.sub(s, 1, 4) == "agt_" then
    ag = load(s)
  else
    local name, ref = string.match(s, "^(.-) %[(%x%x%x%x%x%x)%]$")
    if name then
      local id = redis.call("HGET", KEYS[3], ref)
      if id then ag = load(id) end
      if ag and ag.name ~= name then ag = nil end
    else
      local err
      ag, err = by_name(s)
      if not ag then return nil, err end
    end
  end
  if not ag then return nil, "not_found" end
  if ag.status == "retired" or ag.status == "closed" then return nil, ag.status end
  if ag.presence == "source_lost" then return nil, "bound_source_lost" end
  return ag, nil
end

local failures, chosen, order, resolved = {}, {}, {}, {}
for _, r in ipairs(a.recipients) do
  local ag, err = resolve(r.s)
  if err then
    table.insert(failures, {to = r.s, reason = err})
  else
    resolved[r.s] = ag.id
  end
  if ag and not chosen[ag.id] then
    chosen[ag.id] = ag
    table.insert(order, ag.id)
  end
end
if #failures > 0 then
  return cjson.encode({status = "recipients", failures = failures})
end
if a.quiet_invalid then
  return cjson.encode({status = "quiet_not_allowed"})
end

-- Omitted policy: quiet only if every recipient is bound to a thread.
local policy = a.policy
if policy == "auto" then
  policy = "quiet"
  for _, id in ipairs(order) do
    local bs = chosen[id].bound_source
    if type(bs) ~= "table" or type(bs.thread_id) ~= "string" or bs.thread_id == "" then
      policy = "wake"
    end
  end
end

local now = a.now_us
local s = redis.call("INCR", KEYS[4])
local observations, deliveries = {}, {}
for i, id in ipairs(order) do
  local ag = chosen[id]
  local did = a.delivery_ids[i]
  local label = ag.name .. " [" .. ag.ref .. "]"
  local presence = ag.presence
  if type(presence) ~= "string" then presence = "unknown" end
  redis.call("HSET", KEYS[8 + i],
    "id", did, "message_id", a.message_id, "agent_id", id, "sender_id", a.sender_id,
    "recipient", label,
    "transport", ag.transport.kind, "policy", policy, "stage", "target_selected",
    "admitted_us", now, "target_selected_us", now, "fence", 0, "lease_until_ms", 0,
    "retry_at_ms", 0, "attempts", "[]")
  redis.call("ZADD", KEYS[7], a.due_ms, did)
  table.insert(observations, {delivery_id = did, recipient = label, agent_id = id,
    transport = ag.transport.kind, stage = "target_selected", presence = presence})
  table.insert(deliveries, {did, id})
end

redis.call("HSET", KEYS[5], "json", ARGV[2], "created_us", now, "seq", s,
  "policy", policy, "deliveries", cjson.encode(deliveries))
if a.has_bcc then
  -- which recipient string is which agent: only bcc views need it
  redis.call("HSET", KEYS[5], "resolved", cjson.encode(resolved))
end
redis.call("ZADD", KEYS[#KEYS], string.format("%d", math.floor(tonumber(now) / 1000)),
  a.message_id)
if a.thread_id ~= a.message_id then
  -- a thread that this message starts needs no set until a second one joins
  redis.call("ZADD", KEYS[6], s, a.message_id)
end

local sender = cjson.decode(sender_raw)
if tonumber(now) > tonumber(sender.last_active_us) then
  sender.last_active_us = now
  redis.call("HSET", KEYS[1], a.sender_id, cjson.encode(sender))
end

if a.idem_fp ~= "" then
  -- the observations as they were at admission: what a replay answers
  redis.call("SET", KEYS[8], cjson.encode({fp = a.idem_fp, message_id = a.message_id,
    observations = observations}), "EX", a.idem_ttl_s)
end

return cjson.encode({status = "ok", policy = policy, observations = observations,
  created_us = now})
