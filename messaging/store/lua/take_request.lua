#!lua flags=allow-oom
-- take_request: one request from a rate bucket that every API process shares
-- (the generic cell rate algorithm: the bucket holds the time at which it is
-- empty again, by the store's clock).
--
-- Allowed while the store is full (maxmemory under noeviction): every request
-- of the API passes this check, and a full store must still answer reads (and
-- refuse writes with STORE_FULL at their own step). A bucket is a few bytes that
-- expire within about a second.
--
-- KEYS[1]  bucket  string  when the bucket is full again (µs since the epoch)
--
-- ARGV[1]  interval (µs): one request's share of a second at the rate
-- ARGV[2]  burst (µs): how far past now that time may run (the bucket's size)
--
-- Returns 0 when the request may go, else how long until one may (µs).

local bucket = KEYS[1]
local interval_us = tonumber(ARGV[1])
local burst_us = tonumber(ARGV[2])

local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local full_at = tonumber(redis.call("GET", bucket)) or now
if full_at < now then
  full_at = now
end
local next_full_at = full_at + interval_us
if next_full_at - now > burst_us then
  return next_full_at - burst_us - now
end
redis.call("SET", bucket, string.format("%.0f", next_full_at),
           "PX", math.ceil((next_full_at - now) / 1000) + 1)
return 0
