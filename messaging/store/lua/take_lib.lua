-- take_lib: a worker's take at one project's ready set, shared by take_ready
-- and take_lease (prepended, functions only).
--
-- A take that empties the ready set may hold the turn open for a few
-- milliseconds: while the open-turn key lives, admission counts the turn as a
-- delivery ready ahead of what it adds, so new mail rides on this turn instead
-- of asking for a ticket of its own. The worker that opened it takes again
-- before it leaves; every take closes what an earlier one opened (it expires
-- by itself only if that worker died).

-- Take (remove) up to `most` of the oldest delivery ids of `ready_key`, if the
-- project (`project_key`, its `lane` field) is still on `served_lane` ("" for
-- the shared queues); hold the turn open (`turn_key`) `hold_ms` ms if this take
-- empties the ready set (0: never).
-- Returns {0, the project's lane} when it is on another lane (nothing taken),
-- else {1, ready count left, the newest score left (0: none), 1 if the turn
-- is held open else 0, delivery ids taken...}. Scores come from the project's
-- sequence: a newest score past the one a turn saw at its start means
-- deliveries were made ready during the turn.
local function take(project_key, ready_key, turn_key, served_lane, most, hold_ms)
  local lane = redis.call("HGET", project_key, "lane") or ""
  if lane ~= served_lane then
    redis.call("DEL", turn_key)
    return {0, lane}
  end
  local out = {1, 0, 0, 0}
  local popped = redis.call("ZPOPMIN", ready_key, most)
  for i = 1, #popped, 2 do
    out[#out + 1] = popped[i]
  end
  out[2] = redis.call("ZCARD", ready_key)
  if out[2] == 0 and #popped > 0 and hold_ms > 0 then
    redis.call("SET", turn_key, "1", "PX", hold_ms)
    out[4] = 1
  else
    redis.call("DEL", turn_key)
  end
  local newest = redis.call("ZRANGE", ready_key, -1, -1, "WITHSCORES")
  if newest[2] then
    out[3] = newest[2]
  end
  return out
end
