-- read_clock: the store's time, for a caller whose own step compares times
-- (the sweeper's candidates, subscription and name expiry, retention's
-- cut-off): it reads the clock of the node that holds the project's keys, so
-- every decision about the project follows one clock.
-- uses: clock_lib
--
-- KEYS[1]  any key of the project (its hash tag routes the call; nothing is read)
--
-- Returns the store's time, us.

return clock_us()
