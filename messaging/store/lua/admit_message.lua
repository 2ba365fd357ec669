-- admit_message: idempotency check, recipient resolution and, only if all of
-- it passes, every write of one send. Any failure writes nothing but the
-- request it spent from the caller's rate bucket (when it owed one).
-- uses: records_lib, resolve_lib, ready_lib, keys_lib, rate_lib
--
-- KEYS[1]  agents   hash   agent_id -> agent JSON
-- KEYS[2]  names    hash   name -> JSON list of agent ids
-- KEYS[3]  refs     hash   ref -> agent_id
-- KEYS[4]  seq      string project sequence
-- KEYS[5]  msg      hash   the message to create
-- KEYS[6]  thread   zset   message ids of its thread
-- KEYS[7]  due      zset   delivery ids by due time (ms)
-- KEYS[8]  idem     string idempotency record (ignored when ARGV idem_fp is "")
-- KEYS[9]  allowed  hash   authorized names -> JSON {expires_ms}
-- KEYS[10] held     zset   held delivery ids by admission sequence
-- KEYS[11] project  hash   the project (its `lane` field)
-- KEYS[12..11+2k]  two per transport named in ARGV ready_kinds, in order: its
--            ready zset and its open-turn string (take_ready.lua)
-- KEYS[12+2k..] two per recipient string, in order: a dlv hash (used in order
--            for each distinct target) and the waiting zset of the string as a
--            name (delivery ids by admission sequence, used when it is pending)
-- then  search_queue  list    messages waiting to be indexed for search
--       retention     zset    stored message ids by when retention looks at them
--       bucket        string  the caller's request rate bucket (rate_lib), last,
--                             only when ARGV rate is given
--
-- Times travel as decimal strings: Lua numbers print with 14 digits only.
-- ARGV[1]  JSON {sender_id, now_us, due_ms, idem_fp, idem_ttl_s, thread_id,
--          message_id, policy ("wake"|"quiet"|"auto"), quiet_invalid (bool),
--          recipients [{s}], delivery_ids [..], has_bcc (bool),
--          ready_kinds [transport kinds whose ready zsets come in KEYS],
--          rate [interval_us, burst_us] (absent: the request was counted before)}
-- ARGV[2]  the message JSON without its sender fields (stored byte for byte
--          after them: `{` + the sender fields + `,` + the rest of ARGV[2])
--
-- Records: messaging/store/schema.py. A pinned target that holds inbound mail
-- (inbound "hold") from another agent is written held, outside the outbox; a
-- pending target (an authorized name no agent has registered) stays at
-- `admitted`, outside the outbox, in its name's waiting zset. Every other
-- delivery joins its transport's ready set here, in the outbox too (the
-- sweeper's net), when its transport is one of ready_kinds.
--
-- The sender's address: the sending agent's own label, except for an agent
-- with a parent that sends to anyone outside its session tree (another root
-- of the parent chain, the human, a pending name): the message then goes out
-- under its root's address (`from`, `sender_id`), `via` the agent's label,
-- and replies, notices and delivery events go to the root.
-- A send with a held or pending delivery, or sent via a root, is put on the
-- search queue for its sender's side now (no dispatch will do it yet).
--
-- A send that owes its request to the caller's rate bucket spends it first, so
-- that an empty bucket refuses it before anything else is looked at.
--
-- Returns a JSON string, one of:
--   {"status":"ok","policy":p,"observations":[..],"created_us":n,
--    "lane":the project's lane, "ready":{kind: [added, ready count]} (a turn
--    a worker holds open counts as one delivery ready, ahead of these),
--    "sender":the sender fields' JSON object, as stored}
--   {"status":"rate_limited","wait_us":n} (nothing else done)
--   {"status":"replay","message_id":id,"observations":[..]} (the record's
--    expiry set again as it was: the only write)
--   {"status":"conflict"}
--   {"status":"sender_gone"}
--   {"status":"recipients","failures":[{"to","reason","candidates"?}]}
--     (candidates: the `Name [ref]` labels of a name's tied agents, reason "ambiguous")
--   {"status":"quiet_not_allowed"}

local agents_key = KEYS[1]
local names_key = KEYS[2]
local refs_key = KEYS[3]
local seq_key = KEYS[4]
local msg = KEYS[5]
local thread_key = KEYS[6]
local due_key = KEYS[7]
local idem_key = KEYS[8]
local allowed_key = KEYS[9]
local held_key = KEYS[10]
local project_key = KEYS[11]
local args_json = ARGV[1]
local rest = ARGV[2]

local a = cjson.decode(args_json)
local tail = #KEYS
if a.rate then
  local wait_us = take_from(KEYS[tail], a.rate[1], a.rate[2])
  if wait_us > 0 then
    return cjson.encode({status = "rate_limited", wait_us = wait_us})
  end
  tail = tail - 1
end
local search_queue_key = KEYS[tail - 1]
local retention_key = KEYS[tail]
local ready_key, turn_key = {}, {}
for i, kind in ipairs(a.ready_kinds) do
  ready_key[kind] = KEYS[10 + 2 * i]
  turn_key[kind] = KEYS[11 + 2 * i]
end
-- Recipient string i's pair of keys: a dlv hash (used in order by the
-- targets) and the name's waiting zset.
local fixed = 11 + 2 * #a.ready_kinds
local recipient_keys = key_groups(KEYS, fixed + 1, #a.recipients, {"dlv", "waiting"})

-- A replay writes the record again as it is, so that the wait after this call
-- covers the admission that wrote it: a wait confirms the writes of its own
-- connection only, and that admission may have come on another one, its own
-- wait not over. Setting the record's own expiry again changes nothing and
-- needs no memory (a full store still replays); a record kept without one
-- (none is written so) is set again with it kept.
local function touch_record(key, rec)
  local at = redis.call("PEXPIRETIME", key)
  if at > 0 then
    redis.call("PEXPIREAT", key, at)
  else
    redis.call("SET", key, rec, "KEEPTTL")
  end
end

if a.idem_fp ~= "" then
  local rec = redis.call("GET", idem_key)
  if rec then
    local r = cjson.decode(rec)
    if r.fp == a.idem_fp then
      touch_record(idem_key, rec)
      return cjson.encode({status = "replay", message_id = r.message_id,
        observations = r.observations})
    end
    return cjson.encode({status = "conflict"})
  end
end

local sender_raw = redis.call("HGET", agents_key, a.sender_id)
if not sender_raw then
  return cjson.encode({status = "sender_gone"})
end
local sender = cjson.decode(sender_raw)
local now = a.now_us
local ctx = {agents = agents_key, names = names_key, refs = refs_key, allowed = allowed_key,
  sender = sender, now_ms = string.format("%d", math.floor(tonumber(now) / 1000)),
  refuse_ties = true}

-- targets in order of first mention: {agent} or {pending = name, auth, waiting}
local failures, targets, seen, resolved = {}, {}, {}, {}
for i, r in ipairs(a.recipients) do
  local ag, err, auth = resolve_recipient(ctx, r.s)
  if ag then
    resolved[r.s] = ag.id
    if not seen[ag.id] then
      seen[ag.id] = true
      table.insert(targets, {agent = ag})
    end
  elseif err == "pending" then
    resolved[r.s] = ""
    if not seen["\0" .. r.s] then
      seen["\0" .. r.s] = true
      table.insert(targets, {pending = r.s, auth = auth, waiting = recipient_keys[i].waiting})
    end
  elseif err == "ambiguous" then
    local candidates = {}
    for _, tied in ipairs(auth) do table.insert(candidates, agent_label(tied)) end
    table.insert(failures, {to = r.s, reason = err, candidates = candidates})
  else
    table.insert(failures, {to = r.s, reason = err})
  end
end
if #failures > 0 then
  return cjson.encode({status = "recipients", failures = failures})
end
if a.quiet_invalid then
  return cjson.encode({status = "quiet_not_allowed"})
end

-- Omitted policy: quiet only if every recipient is bound to a t3 thread.
local policy = a.policy
if policy == "auto" then
  policy = "quiet"
  for _, t in ipairs(targets) do
    local bs = t.agent and t.agent.bound_source
    if type(bs) ~= "table" or bs.kind ~= "t3" or type(bs.thread_id) ~= "string"
        or bs.thread_id == "" then
      policy = "wake"
    end
  end
end

-- Across session trees an agent with a parent speaks with its root's address.
local author = sender
local root_id = root_of(sender)
if root_id ~= sender.id then
  for _, t in ipairs(targets) do
    if t.pending or root_of(t.agent) ~= root_id then
      author = load_agent(ctx, root_id) or sender
      break
    end
  end
end
local head = {from = agent_label(author), sender_name = author.name, sender_id = author.id}
if author.id ~= sender.id then
  head.via, head.via_id = agent_label(sender), sender.id
end
local from_id = author.id
local head_json = cjson.encode(head)

-- The message's place in the project's sequence, and after it one for each
-- target: a delivery joins its ready set at its target's place, so a message's
-- deliveries are taken in the order their recipients were named.
local s = redis.call("INCRBY", seq_key, 1 + #targets) - #targets
local observations, deliveries, withheld, added = {}, {}, {}, {}
local unseen = head.via ~= nil -- no delivery indexes this send for its sender yet
for i, t in ipairs(targets) do
  local did = a.delivery_ids[i]
  local dlv = recipient_keys[i].dlv
  if t.pending then
    write_delivery(dlv, {id = did, message_id = a.message_id, agent_id = "",
      sender_id = from_id, recipient = t.pending, transport = "", policy = policy,
      stage = "admitted", target = "pending", held = false, now_us = now})
    redis.call("ZADD", t.waiting, s, did)
    table.insert(observations, {delivery_id = did, recipient = t.pending,
      agent_id = cjson.null, transport = cjson.null, stage = "admitted", presence = cjson.null,
      target = "pending", held = false, expires_ms = t.auth.expires_ms})
    table.insert(deliveries, {did, ""})
    unseen = true
  else
    local ag = t.agent
    local label = agent_label(ag)
    -- the human releases held mail: their own is never held
    local held = ag.inbound == "hold" and ag.id ~= from_id and from_id ~= "human"
    write_delivery(dlv, {id = did, message_id = a.message_id, agent_id = ag.id,
      sender_id = from_id, recipient = label, transport = ag.transport.kind,
      policy = policy, stage = "target_selected", target = "pinned", held = held,
      now_us = now})
    if held then
      redis.call("ZADD", held_key, s, did)
      table.insert(withheld, ag.id)
      unseen = true
    else
      redis.call("ZADD", due_key, a.due_ms, did)
      local kind = ag.transport.kind
      if ready_key[kind] then
        -- new to every set: it takes the place set aside for it
        redis.call("ZADD", ready_key[kind], s + i, did)
        added[kind] = (added[kind] or 0) + 1
      end
    end
    table.insert(observations, {delivery_id = did, recipient = label, agent_id = ag.id,
      transport = ag.transport.kind, stage = "target_selected", presence = presence_of(ag, now),
      target = "pinned", held = held})
    table.insert(deliveries, {did, ag.id})
  end
end

redis.call("HSET", msg, "json", string.sub(head_json, 1, -2) .. "," .. string.sub(rest, 2),
  "created_us", now, "seq", s,
  "policy", policy, "deliveries", cjson.encode(deliveries))
if #withheld > 0 then
  redis.call("HSET", msg, "withheld", cjson.encode(withheld))
end
if a.has_bcc then
  -- which recipient string is which agent: only bcc views need it
  redis.call("HSET", msg, "resolved", cjson.encode(resolved))
end
redis.call("ZADD", retention_key, string.format("%d", math.floor(tonumber(now) / 1000)),
  a.message_id)
if unseen then
  -- entry: "<ms> <message id> <agent id>...": the agents that see it (searchindex.py)
  local entry = ctx.now_ms .. " " .. a.message_id .. " " .. from_id
  if head.via_id then entry = entry .. " " .. head.via_id end
  redis.call("RPUSH", search_queue_key, entry)
end
if a.thread_id ~= a.message_id then
  -- a thread that this message starts needs no set until a second one joins
  redis.call("ZADD", thread_key, s, a.message_id)
end

-- a send is use: it counts for resolution and for the agent list
if tonumber(now) > used_us(sender) or tonumber(now) > tonumber(sender.last_active_us) then
  if tonumber(now) > tonumber(sender.last_active_us) then sender.last_active_us = now end
  if tonumber(now) > used_us(sender) then sender.used_us = now end
  redis.call("HSET", agents_key, a.sender_id, cjson.encode(sender))
end

if a.idem_fp ~= "" then
  -- the observations as they were at admission: what a replay answers
  redis.call("SET", idem_key, cjson.encode({fp = a.idem_fp, message_id = a.message_id,
    observations = observations}), "EX", a.idem_ttl_s)
end

local ready = {}
for kind, n in pairs(added) do
  ready[kind] = {n, ready_count(ready_key[kind], turn_key[kind])}
end
return cjson.encode({status = "ok", policy = policy, observations = observations,
  created_us = now, lane = redis.call("HGET", project_key, "lane") or "", ready = ready,
  sender = head_json})
