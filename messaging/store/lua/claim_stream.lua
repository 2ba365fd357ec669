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

local open_key = KEYS[1]
local stream_id = ARGV[1]
local now_ms = ARGV[2]
local lease_ms = ARGV[3]
local most_open = ARGV[4]

local now = tonumber(now_ms)
redis.call("ZREMRANGEBYSCORE", open_key, "-inf", now)
if not redis.call("ZSCORE", open_key, stream_id)
    and redis.call("ZCARD", open_key) >= tonumber(most_open) then
  return 0
end
redis.call("ZADD", open_key, now + tonumber(lease_ms), stream_id)
redis.call("PEXPIRE", open_key, tonumber(lease_ms))
return 1
