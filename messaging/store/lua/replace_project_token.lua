-- replace_project_token: make a new token the project's only one. The project
-- hash holds the hash of its live token; authentication refuses a project
-- token whose hash is not that one, so the swap here revokes the old token in
-- the same step that admits the new one.
--
-- KEYS[1]  project  hash  the project (field token_hash: its live token's hash)
--
-- ARGV[1]  the new token's hash
--
-- Returns the old token's hash ("" when the project had none recorded), or
-- false if there is no such project.

local project_key = KEYS[1]
local new_token_hash = ARGV[1]

if redis.call("EXISTS", project_key) == 0 then return false end
local old = redis.call("HGET", project_key, "token_hash") or ""
redis.call("HSET", project_key, "token_hash", new_token_hash)
return old
