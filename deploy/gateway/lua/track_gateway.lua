-- The gateway's own logic (nginx.conf.template): who the client is, the rate limit shared through
-- Redis, and the gateway's refusals in the service's error shape {"error": code, "message": text}.
--
-- Every code answered here is in the service's error catalogue (src/api/errors.ts), with the same status
-- and Retry-After; a test holds this file to it.
--
-- Who the client is (GATEWAY_API_KEYS). `required`: every request carries an X-Api-Key that was
-- provisioned in the Redis of REDIS_URL (scripts/gateway-keys.sh stores its SHA-256 with a name and
-- a limit); a missing key gets 401 api_key_required, an unknown or revoked one 401 api_key_invalid.
-- A key's lookup is kept GATEWAY_KEY_CACHE_S seconds by each nginx worker, so a revoked key is refused
-- within that, and a client that invents keys gets 401s, never a fresh bucket. `off`: keys are
-- ignored and the client is its address.
--
-- Rate limit: per client (its key, with the key's own limit, else GATEWAY_RATE_LIMIT; or its address),
-- requests per second in fixed one-second windows, counted in Redis (rl:<client>:<unix second>), which
-- every gateway instance shares. With GATEWAY_RATE_LIMIT_SYNC_MS > 0 (the default, 10) each nginx
-- worker counts locally and adds its counts to Redis every that many milliseconds, reading back the
-- total of every instance: no Redis round trip on the request path. A worker admits while the total it
-- last read plus what it admitted since is under the limit, so the limit is exact within a worker; across
-- workers and instances each worker over-admits at most what the others admitted within one sync
-- interval (what it has not read back yet): in all, (workers - 1) x one interval's traffic at most.
-- GATEWAY_RATE_LIMIT_SYNC_MS=0 counts every request in Redis as it comes (INCR, one round trip each):
-- exact across instances, at several times the CPU.
--
-- When Redis cannot be reached the gateway keeps serving: each instance counts on its own (an nginx
-- shared dict, common to its workers) until Redis answers again, so the limit holds per instance, N
-- times the limit across N instances, rather than refusing every device because a counter store is
-- down; keys looked up before keep their last answer, a key never seen is limited by its address.
-- Redis is tried again at most once a second meanwhile, with 50 ms timeouts; the change is logged once
-- each way.
local redis = require "nginx.redis"
local lrucache = require "resty.lrucache"
local ffi = require "ffi"

ffi.cdef [[unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);]]

local M = {}

local dict = ngx.shared.track_gateway
local default_limit = 0
local sync_s = 0.01
local keys_required = true
local key_cache_s = 10
local max_body_bytes = "MAX_BODY_BYTES"
local redis_host, redis_port, redis_password, redis_db, redis_label
local REDIS_TIMEOUT_MS = 50
local REDIS_RETRY_S = 1
local REDIS_POOL_SIZE = 64
local REDIS_IDLE_MS = 30000
local KEY_CACHE_ENTRIES = 10000
-- The Redis hash of a provisioned key (scripts/gateway-keys.sh writes it): name, limit.
local KEY_PREFIX = "gw:apikey:"

local function fail(message)
  error("track_gateway: " .. message, 0)
end

local function setting(name, default, pattern, rule, other)
  local value = os.getenv(name) or default
  if not value:match(pattern) and not (other and value:match(other)) then fail(name .. " must be " .. rule .. ", got " .. value) end
  return value
end

-- redis://[[user]:password@]host[:port][/db]
local function parse_redis_url(url)
  local rest = url:match("^redis://(.+)$")
  if not rest then fail("REDIS_URL must look like redis://host:port[/db], got " .. url) end
  local auth, hostpart = rest:match("^(.*)@(.+)$")
  if not hostpart then hostpart = rest end
  local host_port, db = hostpart:match("^([^/]+)/?(%d*)$")
  if not host_port then fail("REDIS_URL must look like redis://host:port[/db], got " .. url) end
  local host, port = host_port:match("^(.-):(%d+)$")
  if not host then host, port = host_port, "6379" end
  local password = auth and auth:match(":(.*)$") or auth
  return host, tonumber(port), password ~= "" and password or nil, tonumber(db), "redis://" .. host .. ":" .. port
end

function M.init()
  default_limit = tonumber(setting("GATEWAY_RATE_LIMIT", "1000", "^%d+$", "a whole number of requests per second (0: off)"))
  sync_s = tonumber(setting("GATEWAY_RATE_LIMIT_SYNC_MS", "10", "^%d+$", "a whole number of milliseconds (0: every request counted in Redis)")) / 1000
  keys_required = setting("GATEWAY_API_KEYS", "required", "^required$", "required or off", "^off$") == "required"
  key_cache_s = tonumber(setting("GATEWAY_KEY_CACHE_S", "10", "^%d+$", "a whole number of seconds"))
  max_body_bytes = os.getenv("MAX_BODY_BYTES") or max_body_bytes
  redis_host, redis_port, redis_password, redis_db, redis_label = parse_redis_url(os.getenv("REDIS_URL") or "redis://127.0.0.1:6379")
end

-- ---- Redis, and what happens while it cannot be reached -------------------------------------------

--- A connection from this worker's pool (authenticated and on its db), or nil and why not.
local function connect()
  local red = redis:new()
  red:set_timeout(REDIS_TIMEOUT_MS)
  local ok, err = red:connect(redis_host, redis_port)
  if not ok then return nil, err end
  if red:get_reused_times() == 0 then
    if redis_password then
      ok, err = red:auth(redis_password)
      if not ok then red:close() return nil, "AUTH: " .. tostring(err) end
    end
    if redis_db then
      ok, err = red:select(redis_db)
      if not ok then red:close() return nil, "SELECT: " .. tostring(err) end
    end
  end
  return red
end

local function redis_reachable()
  return not dict:get("redis_retry_later")
end

local function redis_failed(err)
  dict:set("redis_retry_later", true, REDIS_RETRY_S)
  if dict:add("redis_degraded", true) then
    ngx.log(ngx.ERR, "rate limit: ", redis_label, " cannot be reached (", err, "); counting per gateway instance until it answers")
  end
end

local function redis_answered(red)
  red:set_keepalive(REDIS_IDLE_MS, REDIS_POOL_SIZE)
  if dict:get("redis_degraded") then
    dict:delete("redis_degraded")
    ngx.log(ngx.WARN, "rate limit: ", redis_label, " answers again; limits are shared by every gateway instance")
  end
end

-- ---- API keys -------------------------------------------------------------------------------------

local keys = assert(lrucache.new(KEY_CACHE_ENTRIES))
local digest = ffi.new("unsigned char[32]")

local function sha256_hex(text)
  ffi.C.SHA256(text, #text, digest)
  return (ffi.string(digest, 32):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

--- The key's entry { bucket, limit }, false when Redis does not know it, or nil when Redis cannot
--- be reached and the key was never looked up.
local function lookup(key)
  local entry, stale = keys:get(key)
  if entry ~= nil then return entry end
  if not redis_reachable() then return stale end
  local red, err = connect()
  if not red then redis_failed(err) return stale end
  local hash = sha256_hex(key)
  local found
  found, err = red:hmget(KEY_PREFIX .. hash, "limit", "name")
  if type(found) ~= "table" then
    red:close()
    redis_failed("HMGET: " .. tostring(err))
    return stale
  end
  redis_answered(red)
  if found[1] == ngx.null then
    entry = false
  else
    -- The name goes to the service as X-Api-Key-Name (its refused-requests topic names the fleet).
    entry = { bucket = "k:" .. hash, limit = tonumber(found[1]) or default_limit, name = found[2] ~= ngx.null and found[2] or nil }
  end
  keys:set(key, entry, key_cache_s)
  return entry
end

-- ---- Counting --------------------------------------------------------------------------------------

-- GATEWAY_RATE_LIMIT_SYNC_MS > 0: this worker's counts. windows[second][bucket] = { known, pending }:
-- known is the total Redis gave at the last sync (every instance's synced admissions), pending what
-- this worker admitted since; dirty[second] lists the buckets with something pending.
local windows = {}
local dirty = {}

local function admit_batched(bucket, limit, second)
  local window = windows[second]
  if not window then
    window = {}
    windows[second] = window
    dirty[second] = {}
  end
  local c = window[bucket]
  if not c then
    c = { known = 0, pending = 0 }
    window[bucket] = c
  end
  if c.known + c.pending >= limit then return false end
  if c.pending == 0 then
    local d = dirty[second]
    d[#d + 1] = bucket
  end
  c.pending = c.pending + 1
  return true
end

--- While Redis cannot be reached, whether it answers again (at most once a second per instance).
local function probe()
  if not redis_reachable() then return end
  local red, err = connect()
  if red then
    local pong
    pong, err = red:ping()
    if pong then return redis_answered(red) end
    red:close()
  end
  redis_failed(err)
end

--- Adds this worker's pending counts to Redis and reads back the totals (ngx.timer.every). While
--- Redis cannot be reached, admission counts per instance instead (admit) and this only probes.
local function sync(premature)
  if premature then return end
  local now = ngx.time()
  for second in pairs(windows) do
    if second < now then
      windows[second] = nil
      dirty[second] = nil
    end
  end
  if dict:get("redis_degraded") then return probe() end
  local buckets = dirty[now]
  if not buckets or #buckets == 0 or not redis_reachable() then return end
  dirty[now] = {}
  local window = windows[now]
  local red, err = connect()
  if not red then return redis_failed(err) end
  local sent = {}
  red:init_pipeline(#buckets * 2)
  for i, bucket in ipairs(buckets) do
    local n = window[bucket].pending
    sent[i] = n
    local key = "rl:" .. bucket .. ":" .. now
    red:incrby(key, n)
    red:expire(key, 2)
  end
  local results
  results, err = red:commit_pipeline()
  if not results then
    red:close()
    return redis_failed(err)
  end
  for i, bucket in ipairs(buckets) do
    local total = results[2 * i - 1]
    if type(total) ~= "number" then
      red:close()
      return redis_failed("INCRBY: " .. tostring(total and total[2]))
    end
    local c = window[bucket]
    c.known = total
    -- What was admitted during the round trip stays pending, for the next sync.
    c.pending = c.pending - sent[i]
    if c.pending > 0 then
      local d = dirty[now]
      d[#d + 1] = bucket
    end
  end
  redis_answered(red)
end

--- GATEWAY_RATE_LIMIT_SYNC_MS = 0: this request counted in Redis, or nil and why not.
local function count_in_redis(key)
  local red, err = connect()
  if not red then return nil, err end
  local n
  n, err = red:incr(key)
  if type(n) ~= "number" then
    red:close()
    return nil, "INCR: " .. tostring(err)
  end
  -- The window's first request sets its expiry; the others cost one round trip, not two.
  if n == 1 then
    local ok
    ok, err = red:expire(key, 2)
    if not ok then red:close() return nil, "EXPIRE: " .. tostring(err) end
  end
  redis_answered(red)
  return n
end

local function admit(bucket, limit)
  local second = ngx.time()
  local degraded = dict:get("redis_degraded")
  if not degraded and sync_s > 0 then return admit_batched(bucket, limit, second) end
  if not degraded or redis_reachable() then
    local n, err = count_in_redis("rl:" .. bucket .. ":" .. second)
    if n then return n <= limit end
    redis_failed(err)
  end
  -- incr with an initial value and a time to live: the window's counter of this instance.
  return (dict:incr(bucket .. ":" .. second, 1, 0, 2) or 0) <= limit
end

function M.init_worker()
  if sync_s > 0 then
    local ok, err = ngx.timer.every(sync_s, sync)
    if not ok then ngx.log(ngx.ERR, "rate limit: cannot start the sync timer: ", err) end
  end
end

-- ---- The access phase of POST /track -----------------------------------------------------------------

local function json_refusal(status, code, message, retry_after)
  local body = '{"error":"' .. code .. '","message":"' .. message .. '"}'
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  -- A length rather than chunks: HTTP/1.0 clients keep their connection.
  ngx.header["Content-Length"] = #body
  if retry_after then ngx.header["Retry-After"] = retry_after end
  ngx.print(body)
  return ngx.exit(ngx.HTTP_OK)
end

function M.access()
  local bucket, limit
  -- Only the gateway names the key: a client's own X-Api-Key-Name never reaches the service.
  ngx.req.clear_header("X-Api-Key-Name")
  if keys_required then
    local key = ngx.var.http_x_api_key
    if not key or key == "" then
      return json_refusal(401, "api_key_required", "send the fleet's API key in X-Api-Key")
    end
    local entry = lookup(key)
    if entry == false then
      return json_refusal(401, "api_key_invalid", "this X-Api-Key is unknown or revoked")
    end
    if entry then
      bucket, limit = entry.bucket, entry.limit
      if entry.name then ngx.req.set_header("X-Api-Key-Name", entry.name) end
    end
  end
  if not bucket then bucket, limit = "a:" .. ngx.var.remote_addr, default_limit end
  if limit == 0 or admit(bucket, limit) then return end
  return json_refusal(429, "rate_limited", "more than " .. limit .. " requests per second for this client (its key's limit or GATEWAY_RATE_LIMIT); retry after 1 s", "1")
end

-- error_page targets: /_gateway/<status>.
local REFUSALS = {
  ["400"] = { "bad_request", "the request is not valid HTTP/1.x (malformed request line or headers, duplicate Content-Length, Content-Length with Transfer-Encoding)" },
  ["408"] = { "request_timeout", "the request was not received in time" },
  ["413"] = { "payload_too_large", function() return "body is larger than " .. max_body_bytes .. " bytes (MAX_BODY_BYTES)" end },
  ["431"] = { "request_header_too_large", "request header fields are too large (at most 4 lines of 8 KiB)" },
  ["500"] = { "gateway_error", "the gateway failed to handle the request" },
  ["502"] = { "service_unreachable", "the ingestion service cannot be reached; retry", "1" },
  ["503"] = { "service_unavailable", "the ingestion service is not available; retry", "1" },
  ["504"] = { "service_timeout", "the ingestion service did not answer in time; retry", "1" },
}

function M.refusal()
  local status = ngx.var.uri:match("^/_gateway/(%d+)$") or "500"
  local refusal = REFUSALS[status] or REFUSALS["500"]
  local message = refusal[2]
  if type(message) == "function" then message = message() end
  return json_refusal(tonumber(status), refusal[1], message, refusal[3])
end

function M.not_found()
  return json_refusal(404, "not_found", "no such path; POST /track takes track points")
end

return M
