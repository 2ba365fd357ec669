-- take_lease: take_ready and lease_deliveries in one script, for a transport
-- that leases what it takes at once (one idempotent by delivery id: the
-- inbox). The hash of each delivery taken is derived from the project's
-- prefix (keyspace_lib): it shares the project's slot with every key given.
-- uses: take_lib, lease_lib, keyspace_lib
--
-- KEYS[1]  project    hash    the project (its `lane` field)
-- KEYS[2]  ready      zset    delivery ids of one transport by when they became ready
-- KEYS[3]  turn       string  present while a turn is held open (PX)
-- KEYS[4]  due        zset    delivery ids by due time (ms)
-- KEYS[5]  agents     hash    agent_id -> agent JSON
-- KEYS[6]  in_flight  zset    capped requests under way (lease_lib)
--
-- ARGV[1]  the lane the worker serves ("" for the shared queues)
-- ARGV[2]  how many to take at most
-- ARGV[3]  how long to hold the turn open if this take empties the ready set,
--          ms ("0": never)
-- ARGV[4]  lease length, ms
-- ARGV[5]  "1" when the transport is idempotent by delivery id, "0" otherwise
--
-- Returns {take, leased}: take_lib's take ({0, lane}, or {1, left, newest,
-- held, ids...}), and lease_free's leased, each delivery by its place among
-- the ids taken (from 1). A delivery taken and not free is someone else's
-- (or waits for its due time): it stays in the due set, as after take_ready.

local project_key = KEYS[1]
local ready_key = KEYS[2]
local turn_key = KEYS[3]
local due_key = KEYS[4]
local agents_key = KEYS[5]
local in_flight_key = KEYS[6]
local served_lane = ARGV[1]
local most = ARGV[2]
local hold_ms = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local idempotent = ARGV[5]

local taken = take(project_key, ready_key, turn_key, served_lane, most, hold_ms)
if taken[1] == 0 or #taken == 4 then
  return {taken, {}}
end
local prefix = project_prefix(project_key)
local dlv_keys = {}
for i = 5, #taken do
  dlv_keys[i - 4] = keyspace.delivery(prefix, taken[i])
end
local leased = lease_free(due_key, agents_key, in_flight_key, dlv_keys, lease_ms, idempotent,
  0, 0, 0, 0)
return {taken, leased[1]}
