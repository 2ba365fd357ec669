-- mark_message: set the recipient's read or ack time once; ack also reads.
--
-- KEYS[1]  dlv  hash  the recipient's delivery of the message
--
-- ARGV[1]  "read" or "ack"
-- ARGV[2]  now, us (decimal string)
--
-- Returns {read_us, ack_us} after the change ("" for unset), or {} when the
-- delivery is gone (archived meanwhile): nothing is written.

if redis.call("EXISTS", KEYS[1]) == 0 then return {} end
redis.call("HSETNX", KEYS[1], "read_us", ARGV[2])
if ARGV[1] == "ack" then
  redis.call("HSETNX", KEYS[1], "ack_us", ARGV[2])
end
local d = redis.call("HMGET", KEYS[1], "read_us", "ack_us")
return {d[1] or "", d[2] or ""}
