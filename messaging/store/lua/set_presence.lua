-- set_presence: record what an agent's host says of it and move its activity
-- forward (its use too, for busy and idle); when this report changes its
-- presence to `idle` or `exited`, send the notice of every idle subscription
-- waiting on it. Taking a subscription off the waiting list and sending its
-- notice are one step, so however many reports race, each subscription gets
-- one notice.
-- uses: notice_lib
--
-- KEYS[1]   agents     hash    agent_id -> agent JSON
-- KEYS[2]   seq        string  project sequence
-- KEYS[3]   due        zset    delivery ids by due time (ms)
-- KEYS[4]   sub_due    zset    waiting subscription ids by expiry (ms)
-- KEYS[5]   idle_subs  hash    target agent_id -> JSON of its waiting subscriptions
-- KEYS[6]   retention  zset    stored message ids by when retention looks at them
-- KEYS[7]   held       zset    held delivery ids by admission sequence
-- KEYS[8..]  five per subscription the caller saw waiting on this agent, in
--            the order of ARGV[6]: the subscription hash, its notice's
--            message hash, delivery hash and thread zset, the subscriber's
--            events stream
--
-- ARGV[1]  agent id
-- ARGV[2]  state: busy | idle | exited | source_lost
-- ARGV[3]  now, us (decimal string)
-- ARGV[4]  the notices' outbox due time, ms (decimal string)
-- ARGV[5]  events stream cap (approximate MAXLEN)
-- ARGV[6]  JSON list of the subscription ids the caller saw waiting
-- ARGV[7]  how long a subscription is kept after its notice, s
--
-- Returns false when there is no such agent; {"retry"} when a subscription
-- the caller did not see is waiting (nothing written: read them again);
-- otherwise {agent JSON, then per notice sent: subscription id, delivery id,
-- transport}.

local agents_key = KEYS[1]
local seq_key = KEYS[2]
local due_key = KEYS[3]
local sub_due_key = KEYS[4]
local idle_subs_key = KEYS[5]
local retention_key = KEYS[6]
local held_key = KEYS[7]
local agent_id = ARGV[1]
local state = ARGV[2]
local now_us = ARGV[3]
local notice_due_ms = ARGV[4]
local events_cap = ARGV[5]
local expected_json = ARGV[6]
local keep_s = ARGV[7]
local subscriptions = notice_keys(KEYS, 8)

local raw = redis.call("HGET", agents_key, agent_id)
if not raw then return false end
local agent = cjson.decode(raw)
local expected = cjson.decode(expected_json)
local fires = (state == "idle" or state == "exited") and agent.presence ~= state

if fires then
  local w = redis.call("HGET", idle_subs_key, agent_id)
  if w then
    local seen = {}
    for _, sid in ipairs(expected) do seen[sid] = true end
    for sid, _ in pairs(cjson.decode(w)) do
      if not seen[sid] then return {"retry"} end
    end
  end
end

agent.presence = state
if tonumber(now_us) > tonumber(agent.last_active_us) then
  agent.last_active_us = now_us
end
-- busy and idle are use (resolution ranks by it); an exited report is not
if (state == "busy" or state == "idle")
    and tonumber(now_us) > tonumber(agent.used_us or agent.registered_us or "0") then
  agent.used_us = now_us
end
local agent_json = cjson.encode(agent)
redis.call("HSET", agents_key, agent_id, agent_json)

local out = {agent_json}
if fires then
  local g = {agents = agents_key, seq = seq_key, due = due_key, sub_due = sub_due_key,
    retention = retention_key, held = held_key, now_us = now_us, due_ms = notice_due_ms,
    maxlen = events_cap, keep_s = keep_s}
  for i, sid in ipairs(expected) do
    if take_waiting(idle_subs_key, agent_id, sid) then
      for _, v in ipairs(fire_notice(subscriptions[i], state, g)) do
        table.insert(out, v)
      end
    end
  end
end
return out
