-- record_outcomes: the transport's answer for each leased delivery, each
-- recorded only under its holder's fencing token. A retry frees the lease and
-- sets when the delivery is due again; its stage does not change. Every time
-- here is the store's (clock_lib): when the attempt ended, when a retry is
-- due, how long an endpoint has failed and until when it is held.
-- uses: clock_lib, outcome_lib
--
-- KEYS[1]     due     zset    delivery ids by due time (ms)
-- KEYS[2]     agents  hash    agent_id -> agent JSON (the endpoint's health)
-- KEYS[3]     stats      hash  delivery counters
-- KEYS[4]     in_flight  zset  capped requests under way (lease_deliveries)
-- KEYS[5..]   two per delivery: its dlv hash, its sender's events stream
--
-- ARGV[1]  events stream cap (approximate MAXLEN)
-- ARGV[2]  failures in a row that, lasting ARGV[3] ms or more, make an
--          endpoint unhealthy; ARGV[4] ms: how long it is then held before
--          the next attempt probes it
-- ARGV[5]  the dispatch latency buckets' upper bounds, ms, space-separated,
--          the last `inf` (see dispatch_latency in outcome_lib)
-- ARGV[6..] six per delivery, in order:
--          fencing token;
--          "accepted" | "rejected" | "failed" | "unknown" | "retry";
--          how long until the retry is due, ms ("retry" only);
--          error text for the attempt ("" for none);
--          "1" when the recipient's side already showed it (delivery_observed);
--          what the attempt says of the endpoint: "ok" (it answered), "down"
--          (no answer, or 408/429/5xx), "" (nothing known)
--
-- An unhealthy endpoint's deliveries wait (lease_deliveries skips them) until
-- the hold ends; one attempt then probes it, and an answer makes it healthy.
--
-- Idle notices come from `courier`, which has no event stream to tell.
--
-- A recorded attempt is no longer under way, for the caps of lease_deliveries.
--
-- Returns one flag per delivery: 1 recorded, 0 stale token or nothing leased.

local due_key = KEYS[1]
local agents_key = KEYS[2]
local stats_key = KEYS[3]
local in_flight_key = KEYS[4]
local events_cap = ARGV[1]
local unhealthy_failures = tonumber(ARGV[2])
local unhealthy_after_ms = tonumber(ARGV[3])
local hold_ms = tonumber(ARGV[4])
local latency_bounds = ARGV[5]
local now = clock_us()
local now_us = time_text(now)
local now_ms = math.floor(now / 1000)
local now_ms_text = time_text(now_ms)
-- Each delivery's keys and arguments, by name.
local deliveries = {}
for p = 0, (#KEYS - 4) / 2 - 1 do
  local a = 6 + 6 * p
  deliveries[p + 1] = {dlv = KEYS[5 + 2 * p], events = KEYS[6 + 2 * p], fence = ARGV[a],
    kind = ARGV[a + 1], retry_in_ms = tonumber(ARGV[a + 2]), err = ARGV[a + 3],
    displayed = ARGV[a + 4], signal = ARGV[a + 5]}
end

-- The recipient agent's record, read once per call.
local agents = {}

local function endpoint_health(id, signal)
  if signal == "" or not id then return end
  if agents[id] == nil then
    agents[id] = redis.call("HGET", agents_key, id) or false
  end
  if not agents[id] then return end
  local agent = cjson.decode(agents[id])
  local ep = agent.endpoint
  if type(ep) ~= "table" then ep = {failures = 0} end
  if signal == "ok" then
    if ep.failures == 0 and not ep.hold_until_ms then return end
    ep = {failures = 0}
  else
    ep.failures = ep.failures + 1
    ep.failing_since_ms = ep.failing_since_ms or now_ms_text
    if ep.failures >= unhealthy_failures
        and now_ms - tonumber(ep.failing_since_ms) >= unhealthy_after_ms then
      ep.hold_until_ms = string.format("%d", now_ms + hold_ms)
    end
  end
  agent.endpoint = ep
  agents[id] = cjson.encode(agent)
  redis.call("HSET", agents_key, id, agents[id])
end

local function record(r, counts)
  local dlv, kind, displayed = r.dlv, r.kind, r.displayed
  local fence, lease_until_ms, attempts_json, id, stage, message_id, recipient, sender_id,
    seen_early, agent_id, admitted_us = unpack(redis.call("HMGET", dlv, "fence",
      "lease_until_ms", "attempts", "id", "stage", "message_id", "recipient", "sender_id",
      "seen_early", "agent_id", "admitted_us"))
  if fence ~= r.fence or not lease_until_ms or lease_until_ms == "0" then
    return 0
  end
  endpoint_health(agent_id, r.signal)
  redis.call("ZREM", in_flight_key, (agent_id or "") .. " " .. id)
  if kind == "retry" then
    count(counts, "retry", 1)
    local retry_at = time_text(now_ms + r.retry_in_ms)
    redis.call("HSET", dlv, "lease_until_ms", 0, "retry_at_ms", retry_at,
      "attempts", end_attempt(attempts_json, kind, r.err, now_us))
    redis.call("ZADD", due_key, retry_at, id)
    return 1
  end
  if seen_early then
    -- the recipient's side showed it before this outcome was recorded
    redis.call("HDEL", dlv, "seen_early")
    if kind == "accepted" then displayed = "1" end
  end
  stage = close_attempt(dlv, attempts_json, stage, kind, r.err, now_us,
    displayed == "1" and kind == "accepted")
  settle_outcome({due = due_key, counts = counts, events = r.events,
    events_cap = events_cap, delivery_id = id, message_id = message_id, recipient = recipient,
    sender_id = sender_id, stage = stage, outcome = kind, latency_bounds = latency_bounds,
    admitted_us = admitted_us, now = now, observed = stage == "delivery_observed"})
  return 1
end

-- A delivery that fails to record (a damaged record) fails the call; what was
-- recorded before it stays, counted.
local counts = new_counts()
local out = {}
for i, r in ipairs(deliveries) do
  local ok, recorded = pcall(record, r, counts)
  if not ok then
    add_counts(stats_key, counts)
    error(recorded)
  end
  out[i] = recorded
end
add_counts(stats_key, counts)
return out
