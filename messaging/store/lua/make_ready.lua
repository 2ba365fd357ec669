-- make_ready: deliveries join their project's ready set for one transport (the
-- hand-overs after admission: sweeper, redrive, retries, notices; a send's
-- deliveries join in admit_message). Made ready together, they are taken in
-- the order given.
-- uses: ready_lib
--
-- KEYS[1]  project  hash    the project (its `lane` field)
-- KEYS[2]  ready    zset    delivery ids of one transport by when they became ready
-- KEYS[3]  seq      string  the project's monotonic sequence
--
-- ARGV[1..]  delivery ids, in order (already there: kept where they are)
--
-- Returns {added, the project's lane ("" for the shared queues), ready count}.

local added = 0
for i = 1, #ARGV do
  added = added + ready_delivery(KEYS[2], KEYS[3], ARGV[i])
end
return {added, redis.call("HGET", KEYS[1], "lane") or "", redis.call("ZCARD", KEYS[2])}
