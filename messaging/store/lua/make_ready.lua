-- make_ready: deliveries join their project's ready set for one transport, the
-- set that workers take from (oldest first) when the project's turn comes.
--
-- KEYS[1]  project  hash  the project (its `lane` field)
-- KEYS[2]  ready    zset  delivery ids of one transport by when they became ready (ms)
--
-- ARGV[1]    now, ms (decimal string)
-- ARGV[2..]  delivery ids (already there: kept where they are)
--
-- Returns {added, the project's lane ("" for the shared queues), ready count}.

local added = 0
for i = 2, #ARGV do
  added = added + redis.call("ZADD", KEYS[2], "NX", ARGV[1], ARGV[i])
end
return {added, redis.call("HGET", KEYS[1], "lane") or "", redis.call("ZCARD", KEYS[2])}
