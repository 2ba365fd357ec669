-- lease_lib: taking the dispatch lease of each delivery that is free, with a
-- fresh fencing token, and recording the attempt before any I/O; shared by
-- lease_deliveries and take_lease (prepended, functions only). Every time here
-- is the store's (clock_lib): when a lease ends, whether one has ended, when a
-- retry or an endpoint's hold is over, when the attempt began.
-- uses: clock_lib
--
-- A delivery is free when it is admitted or selected; or waiting for a retry
-- (or a redrive) whose time has come and no one holds it; or, for idempotent
-- transports only, its holder's lease expired before it recorded an outcome.
-- A recorded outcome is leased again only by a redrive. Stages only move
-- forward: a redriven delivery keeps its stage while the new attempt runs;
-- `dispatch_started_us` and `provider_result_recorded_us` are the latest
-- attempt's (each attempt keeps its own times in `attempts`).
-- A held delivery or one whose target is pending is never free.
-- A free delivery whose recipient's endpoint is held (unhealthy, see
-- record_outcome) is not leased: it is due again when the hold ends.
-- With caps, a lease holds a slot (an entry of the in-flight set) until its
-- outcome is recorded or the slot runs out: a slot lasts slot_ms, far less
-- than the lease, and the worker renews it while its request runs
-- (renew_slots), so a worker that died gives its slots back within slot_ms
-- though its lease (what makes its request `unknown`) runs on. A free
-- delivery past a cap is not leased ("busy"): it is due again after busy_ms,
-- and its count of sweeps without a lease starts again (a worker reached it:
-- it waits for a slot, not behind a backlog).

-- Lease what is free of the delivery hashes `dlv_keys` (a list).
--   due_key        zset  delivery ids by due time (ms)
--   agents_key     hash  agent_id -> agent JSON (a webhook endpoint's health)
--   in_flight_key  zset  "<agent_id> <delivery_id>" of capped requests under way,
--                        by slot end (ms)
--   lease_ms       lease length, ms
--   idempotent     "1" when the transport is idempotent by delivery id (an
--                  expired lease may then be taken over), "0" otherwise
--   project_cap    requests of the project under way at once, at most (0: no cap)
--   endpoint_cap   requests to one recipient's endpoint under way at once, at
--                  most (0: no cap)
--   busy_ms        how long a delivery left for a cap waits before it is due again
--   slot_ms        how long a capped request's slot lasts unless renewed
-- Returns {leased, busy}: leased a flat array, 9 fields per leased delivery: its
-- index in `dlv_keys` (from 1), fence, agent id, message id, sender id, attempt
-- number, the attempt number within this round (attempts since admission or the
-- last redrive), when it was admitted (us), and the recipient agent's JSON (""
-- when it is gone), read with the lease so that preparing the request needs no
-- other read; busy the index of each delivery left for a cap.
local function lease_free(due_key, agents_key, in_flight_key, dlv_keys, lease_ms, idempotent,
                          project_cap, endpoint_cap, busy_ms, slot_ms)
  local now = clock_us()
  local now_ms = math.floor(now / 1000)
  local now_us = time_text(now)

  local lease_until = string.format("%d", now_ms + lease_ms)
  local slot_until = string.format("%d", now_ms + slot_ms)
  local out = {}
  local busy = {}
  local agents = {}
  local holds = {}

  -- What is under way (slots that ran out count no more): in all, and per agent.
  local capped = project_cap > 0 or endpoint_cap > 0
  local under_way, per_agent = 0, {}
  if capped then
    redis.call("ZREMRANGEBYSCORE", in_flight_key, "-inf", "(" .. time_text(now_ms))
    for _, member in ipairs(redis.call("ZRANGE", in_flight_key, 0, -1)) do
      local agent_id = string.match(member, "^%S+")
      per_agent[agent_id] = (per_agent[agent_id] or 0) + 1
      under_way = under_way + 1
    end
  end

  -- Whether one more request to this agent stays within the caps.
  local function within_caps(agent_id)
    if project_cap > 0 and under_way >= project_cap then return false end
    return endpoint_cap == 0 or (per_agent[agent_id] or 0) < endpoint_cap
  end

  -- The recipient agent's JSON ("" when it is gone), read once per script.
  local function agent_json(agent_id)
    if agents[agent_id] == nil then
      agents[agent_id] = redis.call("HGET", agents_key, agent_id) or ""
    end
    return agents[agent_id]
  end

  -- Until when the recipient's endpoint is held (0: not held).
  local function held_until(agent_id)
    if holds[agent_id] == nil then
      holds[agent_id] = 0
      local raw = agent_json(agent_id)
      if raw ~= "" then
        local ep = cjson.decode(raw).endpoint
        if type(ep) == "table" and ep.hold_until_ms then
          holds[agent_id] = tonumber(ep.hold_until_ms)
        end
      end
    end
    return holds[agent_id]
  end

  for i, dlv in ipairs(dlv_keys) do
    local d = redis.call("HMGET", dlv, "stage", "lease_until_ms", "retry_at_ms", "fence",
      "agent_id", "message_id", "attempts", "id", "dispatch_started_us", "outcome", "redrive",
      "sender_id", "round_base", "admitted_us", "held", "target", "sweeps")
    local stage, lease, retry_at = d[1], tonumber(d[2] or "0"), tonumber(d[3] or "0")
    local free = false
    if d[15] == "1" or d[16] == "pending" then
      free = false -- held for the recipient's user, or no agent to deliver to yet
    elseif d[11] == "1" then
      free = lease == 0 and retry_at <= now_ms
    elseif stage == "admitted" or stage == "target_selected" then
      free = true
    elseif stage == "dispatch_started" and not d[10] then
      if lease == 0 then
        free = retry_at <= now_ms
      elseif lease < now_ms then
        free = idempotent == "1"
      end
    end
    if free then
      local hold = held_until(d[5])
      if hold > now_ms then
        free = false
        redis.call("ZADD", due_key, string.format("%d", hold), d[8])
      end
    end
    if free and capped and not within_caps(d[5]) then
      free = false
      table.insert(busy, i)
      redis.call("ZADD", due_key, string.format("%d", now_ms + busy_ms), d[8])
      if d[17] then redis.call("HDEL", dlv, "sweeps") end
    end
    if free then
      local fence = tonumber(d[4]) + 1
      local attempts = cjson.decode(d[7])
      local n = #attempts + 1
      attempts[n] = {n = n, started_us = now_us}
      -- The stage times are the latest attempt's: its start now, its result when it
      -- is recorded (a redrive's earlier result stays in its attempt only).
      local fields = {"fence", fence, "lease_until_ms", lease_until, "retry_at_ms", 0,
        "attempts", cjson.encode(attempts), "dispatch_started_us", now_us}
      if stage == "admitted" or stage == "target_selected" then
        table.insert(fields, "stage")
        table.insert(fields, "dispatch_started")
      end
      redis.call("HSET", dlv, unpack(fields))
      local gone = {}
      if d[10] then table.insert(gone, "provider_result_recorded_us") end
      if d[11] then table.insert(gone, "redrive") end
      if d[17] then table.insert(gone, "sweeps") end
      if #gone > 0 then redis.call("HDEL", dlv, unpack(gone)) end
      redis.call("ZADD", due_key, lease_until, d[8])
      if capped then
        redis.call("ZADD", in_flight_key, slot_until, d[5] .. " " .. d[8])
        per_agent[d[5]] = (per_agent[d[5]] or 0) + 1
        under_way = under_way + 1
      end
      for _, v in ipairs({i, fence, d[5], d[6], d[12] or "", n, n - tonumber(d[13] or "0"),
          d[14], agent_json(d[5])}) do
        table.insert(out, v)
      end
    end
  end
  return {out, busy}
end
