-- notice_lib: the idle notice, shared by subscribe, set_presence and
-- expire_subscriptions (prepended to each when it is loaded; it defines
-- functions only and touches no key of its own).
-- uses: records_lib, keys_lib
--
-- fire_notice(k, state, g) sends one idle subscription's notice:
--   k      {sub, msg, dlv, thread, events}: the subscription hash, the
--          notice's message hash, delivery hash and thread zset, and the
--          subscriber's events stream
--   state  "idle" | "exited" | "expired"
--   g      what every notice script opens with, as notice_context names it
--
-- The caller has already taken the subscription off the waiting list, which
-- is what makes the notice happen once. The notice is a message from
-- `courier` to the subscriber, written the way admission writes a send (the
-- message with its prepared JSON, a thread entry, one delivery at
-- `target_selected`, an outbox entry the worker or the sweeper publishes, a
-- retention entry), plus an `idle_notice` event on the subscriber's stream.
-- A notice that starts its own thread gets no thread set (as admission);
-- the subscription expires keep_s after it.
-- A subscriber that holds peer mail (inbound "hold") gets its notice held
-- like peer mail, for the project's human to release or decline: outside the
-- outbox, withheld from the subscriber, no `idle_notice` event.
-- Returns {subscription id, delivery id, transport ("" when held)}.

local function fire_notice(k, state, g)
  local s = redis.call("HMGET", k.sub, "id", "subscriber_id", "notice_message_id",
    "notice_delivery_id", "target", "target_id", "notice_" .. state, "notice_thread_id")
  local sid, subscriber_id, mid, did = s[1], s[2], s[3], s[4]
  local ag = cjson.decode(redis.call("HGET", g.agents, subscriber_id))
  local label = agent_label(ag)
  local transport = ag.transport.kind
  local presence = presence_of(ag, g.now_us)
  local seq = redis.call("INCR", g.seq)
  local held = ag.inbound == "hold"
  write_delivery(k.dlv, {id = did, message_id = mid, agent_id = subscriber_id,
    sender_id = "courier", recipient = label, transport = transport, policy = "wake",
    stage = "target_selected", target = "pinned", held = held, now_us = g.now_us})
  if held then
    redis.call("ZADD", g.held, seq, did)
  else
    redis.call("ZADD", g.due, g.due_ms, did)
  end
  local obs = {delivery_id = did, recipient = label, agent_id = subscriber_id,
    transport = transport, stage = "target_selected", presence = presence, target = "pinned",
    held = held}
  redis.call("HSET", k.msg, "json", s[7], "created_us", g.now_us, "seq", seq,
    "policy", "wake", "deliveries", cjson.encode({{did, subscriber_id}}),
    "observations", cjson.encode({obs}), "resolved", cjson.encode({[label] = subscriber_id}))
  if held then
    redis.call("HSET", k.msg, "withheld", cjson.encode({subscriber_id}))
  end
  if s[8] ~= mid then
    redis.call("ZADD", k.thread, seq, mid)
  end
  redis.call("ZADD", g.retention, string.format("%d", math.floor(tonumber(g.now_us) / 1000)), mid)
  redis.call("HSET", k.sub, "state", "notified", "outcome", state, "notified_us", g.now_us)
  redis.call("EXPIRE", k.sub, g.keep_s)
  redis.call("ZREM", g.sub_due, sid)
  if held then
    return {sid, did, ""}
  end
  redis.call("XADD", k.events, "MAXLEN", "~", g.maxlen, "*", "type", "idle_notice",
    "data", cjson.encode({subscription_id = sid, target = s[5], target_id = s[6],
      state = state, message_id = mid, delivery_id = did, notification_policy = "wake"}))
  return {sid, did, transport}
end

-- What every notice script opens with, by name: the `g` of fire_notice.
--   KEYS[1]  agents     hash    agent_id -> agent JSON
--   KEYS[2]  seq        string  project sequence
--   KEYS[3]  due        zset    delivery ids by due time (ms)
--   KEYS[4]  sub_due    zset    waiting subscription ids by expiry (ms)
--   KEYS[5]  idle_subs  hash    target agent_id -> JSON of its waiting subscriptions
--   KEYS[6]  retention  zset    stored message ids by when retention looks at them
--   KEYS[7]  held       zset    held delivery ids by admission sequence
--   ARGV[1]  now_us     now, us (decimal string)
--   ARGV[2]  due_ms     the notices' outbox due time, ms (decimal string)
--   ARGV[3]  maxlen     events stream cap (approximate MAXLEN)
--   ARGV[4]  keep_s     how long a subscription is kept after its notice, s
local function notice_context(keys, argv)
  return {agents = keys[1], seq = keys[2], due = keys[3], sub_due = keys[4],
    idle_subs = keys[5], retention = keys[6], held = keys[7],
    now_us = argv[1], due_ms = argv[2], maxlen = argv[3], keep_s = argv[4]}
end

-- The five keys of each subscription in `keys`, from position `base` on, by name.
local function notice_keys(keys, base)
  return key_groups(keys, base, math.floor((#keys - base + 1) / 5),
    {"sub", "msg", "dlv", "thread", "events"})
end

-- Take one subscription off its target's waiting list; true if it was there.
local function take_waiting(idle_subs, target_id, sid)
  local raw = redis.call("HGET", idle_subs, target_id)
  if not raw then return false end
  local waiting = cjson.decode(raw)
  if waiting[sid] == nil then return false end
  waiting[sid] = nil
  if next(waiting) == nil then
    redis.call("HDEL", idle_subs, target_id)
  else
    redis.call("HSET", idle_subs, target_id, cjson.encode(waiting))
  end
  return true
end

-- Send the notice of subscription `sid` (its keys `k`) when it is still on the
-- waiting list of `target_id`, taking it off; what fire_notice returns is
-- appended to `out`.
local function notice_if_waiting(k, target_id, sid, state, g, out)
  if not take_waiting(g.idle_subs, target_id, sid) then return end
  for _, v in ipairs(fire_notice(k, state, g)) do
    table.insert(out, v)
  end
end
