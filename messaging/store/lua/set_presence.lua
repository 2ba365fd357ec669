-- set_presence: record what an agent's host says of it and move its activity
-- forward (its use too, for busy and idle); when this report changes its
-- presence to `idle` or `exited`, send the notice of every idle subscription
-- waiting on it. Taking a subscription off the waiting list and sending its
-- notice are one step, so however many reports race, each subscription gets
-- one notice.
-- uses: notice_lib
--
-- KEYS[1..7] and ARGV[1..4]: the project's notice keys and the notices'
--            times and caps, named g.<name> by notice_context (notice_lib)
-- KEYS[8..]  five per subscription the caller saw waiting on this agent, in
--            the order of ARGV[7]: the subscription hash, its notice's
--            message hash, delivery hash and thread zset, the subscriber's
--            events stream
--
-- ARGV[5]  agent id
-- ARGV[6]  state: busy | idle | exited | source_lost
-- ARGV[7]  JSON list of the subscription ids the caller saw waiting
-- ARGV[8]  the lease of a busy or idle report, us (0: none): past it the
--          agent's presence reads unknown until the next report
--
-- Returns false when there is no such agent; {"retry"} when a subscription
-- the caller did not see is waiting (nothing written: read them again);
-- otherwise {agent JSON, then per notice sent: subscription id, delivery id,
-- transport}.

local g = notice_context(KEYS, ARGV)
local agent_id = ARGV[5]
local state = ARGV[6]
local expected_json = ARGV[7]
local lease_us = tonumber(ARGV[8])
local subscriptions = notice_keys(KEYS, 8)

local raw = redis.call("HGET", g.agents, agent_id)
if not raw then return false end
local agent = cjson.decode(raw)
local expected = cjson.decode(expected_json)
local fires = (state == "idle" or state == "exited")
  and presence_of(agent, g.now_us) ~= state

if fires then
  local w = redis.call("HGET", g.idle_subs, agent_id)
  if w then
    local seen = {}
    for _, sid in ipairs(expected) do seen[sid] = true end
    for sid, _ in pairs(cjson.decode(w)) do
      if not seen[sid] then return {"retry"} end
    end
  end
end

agent.presence = state
if (state == "busy" or state == "idle") and lease_us > 0 then
  agent.presence_until_us = string.format("%d", tonumber(g.now_us) + lease_us)
else
  agent.presence_until_us = nil
end
if tonumber(g.now_us) > tonumber(agent.last_active_us) then
  agent.last_active_us = g.now_us
end
-- busy and idle are use (resolution ranks by it); an exited report is not
if (state == "busy" or state == "idle")
    and tonumber(g.now_us) > tonumber(agent.used_us or agent.registered_us or "0") then
  agent.used_us = g.now_us
end
local agent_json = cjson.encode(agent)
redis.call("HSET", g.agents, agent_id, agent_json)

local out = {agent_json}
if fires then
  for i, sid in ipairs(expected) do
    notice_if_waiting(subscriptions[i], agent_id, sid, state, g, out)
  end
end
return out
