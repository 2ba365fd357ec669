-- claim_stream: hold (or renew) one of an agent's few open event-stream slots.
--
-- KEYS[1]  open streams  zset  stream id -> lease end (ms)
--
-- ARGV[1]  stream id
-- ARGV[2]  now (ms)
-- ARGV[3]  lease (ms)
-- ARGV[4]  most streams open at once
--
-- Returns 1 when the stream holds a slot until now + lease, 0 when all are taken.

local now = tonumber(ARGV[2])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if not redis.call("ZSCORE", KEYS[1], ARGV[1])
    and redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call("PEXPIRE", KEYS[1], tonumber(ARGV[3]))
return 1
