-- take_ready: a worker's turn at one project: take (remove) the oldest ready
-- deliveries of one transport, if the project is still on the lane the worker
-- serves (take_lib). Taking is not leasing: lease_deliveries decides what is
-- free; what a worker took and never leased is due again from the due set
-- (the sweeper).
-- uses: take_lib
--
-- KEYS[1]  project  hash    the project (its `lane` field)
-- KEYS[2]  ready    zset    delivery ids of one transport by when they became ready (ms)
-- KEYS[3]  turn     string  present while a turn is held open (PX)
--
-- ARGV[1]  the lane the worker serves ("" for the shared queues)
-- ARGV[2]  how many to take at most
-- ARGV[3]  how long to hold the turn open if this take empties the ready set,
--          ms ("0": never)
--
-- Returns take_lib's take: {0, lane} or {1, left, newest, held, ids...}.

local project_key = KEYS[1]
local ready_key = KEYS[2]
local turn_key = KEYS[3]
local served_lane = ARGV[1]
local most = ARGV[2]
local hold_ms = tonumber(ARGV[3])

return take(project_key, ready_key, turn_key, served_lane, most, hold_ms)
