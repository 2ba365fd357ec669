-- take_ready: a worker's turn at one project: take (remove) the oldest ready
-- deliveries of one transport, if the project is still on the lane the worker
-- serves. Taking is not leasing: lease_deliveries decides what is free; what a
-- worker took and never leased is due again from the due set (the sweeper).
--
-- KEYS[1]  project  hash  the project (its `lane` field)
-- KEYS[2]  ready    zset  delivery ids of one transport by when they became ready (ms)
--
-- ARGV[1]  the lane the worker serves ("" for the shared queues)
-- ARGV[2]  how many to take at most
--
-- Returns {0, the project's lane} when it is on another lane (nothing taken),
-- else {1, ready count left, the newest score left (0: none), delivery ids
-- taken...}. Scores come from the project's sequence: a newest score past the
-- one a turn saw at its start means deliveries were made ready during the turn.

local project_key = KEYS[1]
local ready_key = KEYS[2]
local served_lane = ARGV[1]
local most = ARGV[2]

local lane = redis.call("HGET", project_key, "lane") or ""
if lane ~= served_lane then
  return {0, lane}
end
local out = {1, 0, 0}
local popped = redis.call("ZPOPMIN", ready_key, most)
for i = 1, #popped, 2 do
  out[#out + 1] = popped[i]
end
out[2] = redis.call("ZCARD", ready_key)
local newest = redis.call("ZRANGE", ready_key, -1, -1, "WITHSCORES")
if newest[2] then
  out[3] = newest[2]
end
return out
