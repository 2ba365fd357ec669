#!lua flags=allow-oom
-- take_request: one request from a rate bucket (rate_lib.lua).
-- uses: rate_lib
--
-- Allowed while the store is full (maxmemory under noeviction): every request
-- of the API passes this check, and a full store must still answer reads (and
-- refuse writes with STORE_FULL at their own step).
--
-- KEYS[1]  bucket  string  when the bucket is full again (µs since the epoch)
--
-- ARGV[1]  interval (µs): one request's share of a second at the rate
-- ARGV[2]  burst (µs): how far past now that time may run (the bucket's size)
--
-- Returns 0 when the request may go, else how long until one may (µs).

return take_from(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
