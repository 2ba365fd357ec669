-- make_ready: deliveries join their project's ready set for one transport (the
-- hand-overs after admission: sweeper, redrive, retries, notices; a send's
-- deliveries join in admit_message). Made ready together, they are taken in
-- the order given.
-- uses: ready_lib
--
-- KEYS[1]  project  hash    the project (its `lane` field)
-- KEYS[2]  ready    zset    delivery ids of one transport by when they became ready
-- KEYS[3]  seq      string  the project's monotonic sequence
-- KEYS[4]  turn     string  present while a worker holds a turn open (take_ready)
--
-- ARGV[1..]  delivery ids, in order (already there: kept where they are)
--
-- Returns {added, the project's lane ("" for the shared queues), ready count
-- (a turn held open counts as one, ahead of the rest: ready_count)}.

local project_key = KEYS[1]
local ready_key = KEYS[2]
local seq_key = KEYS[3]
local turn_key = KEYS[4]
local delivery_ids = ARGV

local added = 0
for i = 1, #delivery_ids do
  added = added + ready_delivery(ready_key, seq_key, delivery_ids[i])
end
return {added, redis.call("HGET", project_key, "lane") or "", ready_count(ready_key, turn_key)}
