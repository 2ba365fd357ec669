-- mark_message: set the recipient's read or ack time once; ack also reads.
--
-- KEYS[1]  dlv  hash  the recipient's delivery of the message
--
-- ARGV[1]  "read" or "ack"
-- ARGV[2]  now, us (decimal string)
--
-- Returns {read_us, ack_us} after the change ("" for unset), or {} when the
-- delivery is gone (archived meanwhile): nothing is written.

local dlv = KEYS[1]
local kind = ARGV[1]
local now_us = ARGV[2]

if redis.call("EXISTS", dlv) == 0 then return {} end
redis.call("HSETNX", dlv, "read_us", now_us)
if kind == "ack" then
  redis.call("HSETNX", dlv, "ack_us", now_us)
end
local d = redis.call("HMGET", dlv, "read_us", "ack_us")
return {d[1] or "", d[2] or ""}
