-- rate_lib: one request from a rate bucket that every API process shares (the
-- generic cell rate algorithm: the bucket holds the time at which it is empty
-- again, by the store's clock); shared by take_request and admit_message
-- (prepended; functions only). A bucket is a few bytes that expire within
-- about a second.
--
-- take_from(bucket, interval_us, burst_us): interval_us is one request's share
-- of a second at the rate, burst_us how far past now the bucket's time may run
-- (its size). Returns 0 when the request may go (and spends it), else how long
-- until one may (µs), spending nothing.

local function take_from(bucket, interval_us, burst_us)
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
end
