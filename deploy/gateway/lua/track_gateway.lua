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
-- worker counts locally; every that many milliseconds it adds its counts to the instance's (the shared
-- dict) and reads back the instance's total, and worker 0 adds the instance's new counts to Redis and
-- reads back the other instances': no Redis round trip on the request path, one per instance and
-- interval. A worker admits while the total it last read plus what it admitted since is under the
-- limit, so the limit is exact within a worker; it over-admits at most what the other workers admitted
-- within the last two intervals and the other instances within three (what it has not read back yet).
-- GATEWAY_RATE_LIMIT_SYNC_MS=0 counts every request in Redis as it comes (INCR, one round trip each):
-- exact across instances, at several times the CPU.
--
-- When Redis cannot be reached the gateway keeps serving: each instance counts on its own (its workers
-- still share their counts through the dict) until Redis answers again, so the limit holds per instance, N
-- times the limit across N instances, rather than refusing every device because a counter store is
-- down; keys looked up before keep their last answer, a key never seen is limited by its address.
-- Redis is tried again at most once a second meanwhile, with 50 ms timeouts; the change is logged once
-- each way.
--
-- Idempotency-Key (the IETF draft draft-ietf-httpapi-idempotency-key-header), per client, for
-- GATEWAY_IDEMPOTENCY_WINDOW_S (24 h; 0: the header is ignored). A POST /track with the header is
-- keyed in Redis (gw:idem:<client bucket>:<SHA-256 of the key>) with the SHA-256 of its body:
--   - the first is passed on, its key "in flight"; a 202 from the service is kept as the key's answer,
--     any other answer releases the key (a retry after a 500 is passed on again);
--   - a retry with the same body gets the kept answer again, with `Idempotent-Replayed: true`, and
--     nothing reaches the service; while the first is still in flight (looked at twice, 20 ms
--     apart), 409; with another body, 422;
--   - the gateway waits for the service's answer even when the client has gone (a device that lost
--     its connection retries, and must get the 202 it missed, not a second write).
-- Every gateway instance shares the keys through Redis. While Redis cannot be reached, requests are
-- passed on without the check (a retry may then be written twice), logged once each way.
-- Each nginx worker writes its keys to Redis together: one pipelined round trip at most every
-- GATEWAY_IDEMPOTENCY_SYNC_MS (5) carries the keys of the requests waiting for it (SET NX GET, Redis
-- 7.0 or later) and the answers to keep. The first key after a quiet moment goes at once; under load a
-- keyed request waits for the next write, at most that long. A round trip per request cost the
-- gateway more than the rest of its work (bench/HISTORY.md). 0: each key written in the event loop's
-- turn it came in.
local redis = require "nginx.redis"
local lrucache = require "resty.lrucache"
local semaphore = require "ngx.semaphore"
local ffi = require "ffi"
local bit = require "bit"

-- OpenSSL's SHA-256 in its three low-level calls: OpenSSL 3's one-shot SHA256() fetches the algorithm
-- anew on every call (a hash-table look-up under a lock, seen in a profile of keyed requests). Declared
-- as lua-resty-string declares them: where that module came first, its declaration serves.
pcall(ffi.cdef, [[
typedef struct SHA256state_st { unsigned int h[8]; unsigned int Nl, Nh; unsigned int data[16]; unsigned int num, md_len; } SHA256_CTX;
int SHA256_Init(SHA256_CTX *c);
int SHA256_Update(SHA256_CTX *c, const void *data, size_t len);
int SHA256_Final(unsigned char *md, SHA256_CTX *c);
]])

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
-- Idempotency-Key: how long a key is kept (GATEWAY_IDEMPOTENCY_WINDOW_S), its prefix in Redis, its longest value.
local idem_window_s = 86400
local IDEM_PREFIX = "gw:idem:"
local IDEM_KEY_MAX = 255
-- Keys and kept answers are written at most every idem_sync_s (GATEWAY_IDEMPOTENCY_SYNC_MS); a retry
-- that finds its key in flight looks again idem_recheck_s later, past the next write, before its 409.
local idem_sync_s = 0.005
local idem_recheck_s = 0.02
-- How long a keyed request waits for its write before it is passed on unchecked (Redis timeouts are 50 ms).
local IDEM_WAIT_S = 1
-- Requests passed on unchecked are logged at most this often per gateway instance.
local IDEM_UNCHECKED_LOG_S = 10
-- The Redis commands of the keys' writes, in Redis's protocol (RESP): see resp_commands.
local CRLF = "\r\n"
local RESP_SET = "*7\r\n$3\r\nSET\r\n" -- SET key value NX GET EX <window>
local RESP_SET_NX_GET_EX = nil -- "$2\r\nNX\r\n$3\r\nGET\r\n$2\r\nEX\r\n$<n>\r\n<window>\r\n", made by M.init
local RESP_KEEP = "*5\r\n$3\r\nSET\r\n" -- SET key value XX KEEPTTL
local RESP_XX_KEEPTTL = "$2\r\nXX\r\n$7\r\nKEEPTTL\r\n"
local RESP_GET = "*2\r\n$3\r\nGET\r\n"
local RESP_DEL = "*2\r\n$3\r\nDEL\r\n"

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
  idem_window_s = tonumber(setting("GATEWAY_IDEMPOTENCY_WINDOW_S", "86400", "^%d+$", "a whole number of seconds (0: Idempotency-Key ignored)"))
  local window = tostring(idem_window_s)
  RESP_SET_NX_GET_EX = "$2\r\nNX\r\n$3\r\nGET\r\n$2\r\nEX\r\n$" .. #window .. CRLF .. window .. CRLF
  idem_sync_s = tonumber(setting("GATEWAY_IDEMPOTENCY_SYNC_MS", "5", "^%d+$", "a whole number of milliseconds (0: each key written in the event loop's turn it came in)")) / 1000
  -- Past the next write of the worker that answers the first request, and its round trip.
  idem_recheck_s = 2 * idem_sync_s + 0.01
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
local sha256_ctx = ffi.new("SHA256_CTX")
local digest = ffi.new("unsigned char[32]")
local hex = ffi.new("char[64]")
local HEX_DIGITS = ffi.new("const char[17]", "0123456789abcdef")

--- Lower-case hex of the SHA-256 of text (OpenSSL's, as nginx links it), in a loop the JIT compiles:
--- formatting byte by byte took a keyed request two calls of string.format per byte.
local function sha256_hex(text)
  local C = ffi.C
  C.SHA256_Init(sha256_ctx)
  C.SHA256_Update(sha256_ctx, text, #text)
  C.SHA256_Final(digest, sha256_ctx)
  for i = 0, 31 do
    local b = digest[i]
    hex[2 * i] = HEX_DIGITS[bit.rshift(b, 4)]
    hex[2 * i + 1] = HEX_DIGITS[bit.band(b, 15)]
  end
  return ffi.string(hex, 64)
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

-- GATEWAY_RATE_LIMIT_SYNC_MS > 0 (the file's header says how): windows[second][bucket] = { known,
-- pending }: known is the instance's total as this worker last read it (every worker's published
-- admissions, and the other instances' as Redis gave them), pending what this worker admitted since;
-- dirty[second] lists the buckets with something pending. Redis is sent to by worker 0 alone: a round
-- trip per worker was the larger part of the gateway's CPU per request (bench/HISTORY.md).
-- The dict's keys per bucket and second (window_keys): "a" the instance's published admissions, "s"
-- how many of them are in Redis, "o" the other instances' admissions as Redis last told.
local WINDOW_TTL_S = 2
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

local key_second, keys_of_second = 0, {}

--- The dict's keys of bucket's window in second: { a, o, s }, made once per second and bucket.
local function window_keys(bucket, second)
  if second ~= key_second then key_second, keys_of_second = second, {} end
  local k = keys_of_second[bucket]
  if not k then
    local suffix = second .. ":" .. bucket
    k = { "a:" .. suffix, "o:" .. suffix, "s:" .. suffix }
    keys_of_second[bucket] = k
  end
  return k
end

--- This worker's pending counts added to the instance's, and its known totals read back. A bucket's
--- first admissions in a second put it on the second's list, for worker 0 to send.
local function publish(now)
  for second in pairs(windows) do
    if second < now then
      windows[second] = nil
      dirty[second] = nil
    end
  end
  local buckets = dirty[now]
  if not buckets or #buckets == 0 then return end
  dirty[now] = {}
  local window = windows[now]
  for _, bucket in ipairs(buckets) do
    local c = window[bucket]
    local k = window_keys(bucket, now)
    local n = dict:incr(k[1], c.pending, 0, WINDOW_TTL_S)
    if n then
      if n == c.pending then
        local list = "dirty:" .. now
        dict:lpush(list, bucket)
        dict:expire(list, WINDOW_TTL_S)
      end
      c.known = n + (dict:get(k[2]) or 0)
      c.pending = 0
    end
    -- Otherwise the dict is full: the count stays pending here, and is tried again next time.
  end
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

-- Worker 0's buckets of the current second, a set (taken from the dict's list "dirty:<second>").
local sync_second, sync_buckets = 0, {}

--- Adds the instance's new admissions to Redis and writes back the other instances' (worker 0).
local function send(now)
  if now ~= sync_second then sync_second, sync_buckets = now, {} end
  local list = "dirty:" .. now
  local bucket = dict:rpop(list)
  while bucket do
    sync_buckets[bucket] = true
    bucket = dict:rpop(list)
  end
  if next(sync_buckets) == nil or not redis_reachable() then return end
  local todo = {}
  for bucket in pairs(sync_buckets) do
    local k = window_keys(bucket, now)
    local a, s = dict:get(k[1]) or 0, dict:get(k[3]) or 0
    if a > s then todo[#todo + 1] = { k = k, bucket = bucket, a = a, s = s } end
  end
  if #todo == 0 then return end
  local red, err = connect()
  if not red then return redis_failed(err) end
  red:init_pipeline(2 * #todo)
  local replies = 0
  for _, t in ipairs(todo) do
    local key = "rl:" .. t.bucket .. ":" .. now
    red:incrby(key, t.a - t.s)
    replies = replies + 1
    t.reply = replies
    -- The window's expiry goes with the instance's first count in it.
    if t.s == 0 then
      red:expire(key, WINDOW_TTL_S)
      replies = replies + 1
    end
  end
  local results
  results, err = red:commit_pipeline()
  if not results then
    red:close()
    return redis_failed(err)
  end
  for _, t in ipairs(todo) do
    local total = results[t.reply]
    if type(total) ~= "number" then
      red:close()
      return redis_failed("INCRBY: " .. tostring(total and total[2]))
    end
    dict:set(t.k[3], t.a, WINDOW_TTL_S)
    dict:set(t.k[2], total - t.a, WINDOW_TTL_S)
  end
  redis_answered(red)
end

--- Every GATEWAY_RATE_LIMIT_SYNC_MS (ngx.timer.every). While Redis cannot be reached, the instance
--- counts on its own (the other instances' counts are not renewed, and expire with their second) and
--- worker 0 only probes.
local function sync(premature)
  if premature then return end
  local now = ngx.time()
  publish(now)
  if ngx.worker.id() ~= 0 then return end
  if dict:get("redis_degraded") then return probe() end
  send(now)
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
    ok, err = red:expire(key, WINDOW_TTL_S)
    if not ok then red:close() return nil, "EXPIRE: " .. tostring(err) end
  end
  redis_answered(red)
  return n
end

local function admit(bucket, limit)
  local second = ngx.time()
  if sync_s > 0 then return admit_batched(bucket, limit, second) end
  if redis_reachable() then
    local n, err = count_in_redis("rl:" .. bucket .. ":" .. second)
    if n then return n <= limit end
    redis_failed(err)
  end
  -- incr with an initial value and a time to live: the window's counter of this instance.
  return (dict:incr(window_keys(bucket, second)[1], 1, 0, WINDOW_TTL_S) or 0) <= limit
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

-- ---- Idempotency-Key -------------------------------------------------------------------------------------

--- The request's Idempotency-Key: nil without one, false when it is not a valid one. The draft's form
--- is a Structured Field string ("..."); the bare value many clients send is taken too.
local function idempotency_key()
  local value = ngx.var.http_idempotency_key
  if value == nil then return nil end
  local key = value:match('^"(.*)"$') or value
  if key == "" or #key > IDEM_KEY_MAX or key:find("[^\32-\126]") then return false end
  return key
end

local function request_body()
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body then return body end
  local path = ngx.req.get_body_file()
  if not path then return "" end
  local f = io.open(path, "rb")
  if not f then return "" end
  body = f:read("*a")
  f:close()
  return body
end

local function idem_degraded(err)
  redis_failed(err)
  if dict:add("idem_degraded", true) then
    ngx.log(ngx.ERR, "idempotency: ", redis_label, " cannot be reached (", err, "); requests with an Idempotency-Key are passed on unchecked until it answers")
  end
end

local function idem_answered()
  if dict:get("idem_degraded") then
    dict:delete("idem_degraded")
    ngx.log(ngx.WARN, "idempotency: ", redis_label, " answers again; Idempotency-Key checked again")
  end
end

-- ---- This worker's writes of keys and answers: one pipelined round trip for all that waits ---------
-- idem_batch holds the commands for the next write: batch[i] = { op, redis key, value }, op one of
-- "reserve" (SET NX GET: the key's kept value, or nil once it is this request's), "get", "keep" (SET XX
-- KEEPTTL: a 202 kept), "release" (DEL). Requests wait for its answers on batch.sema; kept answers
-- (from the log phase, which cannot wait) are only queued.

local idem_batch = nil
local idem_scheduled = false
local idem_last_write = 0

-- The write in Redis's protocol (RESP), built and read here: lua-resty-redis builds every command from
-- a new table of its arguments and reads every reply in two or three socket calls, a quarter of a
-- keyed request's Lua time in a profile (bench/HISTORY.md). A write's commands go out as one table of
-- strings and numbers (concatenated in C by the socket's send); its replies are read as they come.

--- Appends a bulk string to out at n; returns the new n.
local function resp_bulk(out, n, text)
  out[n + 1] = "$"
  out[n + 2] = #text
  out[n + 3] = CRLF
  out[n + 4] = text
  out[n + 5] = CRLF
  return n + 5
end

--- The batch's commands, in order, as one table for sock:send.
local function resp_commands(batch)
  local out, n = {}, 0
  for i = 1, batch.n do
    local c = batch[i]
    local op = c[1]
    if op == "reserve" or op == "keep" then
      -- SET key value, then NX GET EX <window> (reserve) or XX KEEPTTL (keep).
      local reserve = op == "reserve"
      out[n + 1] = reserve and RESP_SET or RESP_KEEP
      n = resp_bulk(out, n + 1, c[2])
      n = resp_bulk(out, n, c[3])
      out[n + 1] = reserve and RESP_SET_NX_GET_EX or RESP_XX_KEEPTTL
      n = n + 1
    else
      out[n + 1] = op == "get" and RESP_GET or RESP_DEL
      n = resp_bulk(out, n + 1, c[2])
    end
  end
  return out
end

--- The replies of `count` commands: a bulk string, ngx.null, a status (its text), an integer, or a
--- command's own error as { false, message } (as lua-resty-redis gives them); or nil and why not.
local function resp_replies(sock, count)
  local results = {}
  local got = 0
  local buf, pos = "", 1
  while got < count do
    local reply, next_pos
    local eol = buf:find(CRLF, pos, true)
    if eol then
      local prefix = buf:byte(pos)
      local line = buf:sub(pos + 1, eol - 1)
      if prefix == 36 then -- $: a bulk string of <size> bytes, or -1: nil
        local size = tonumber(line)
        if not size then return nil, "Redis's reply is not RESP: $" .. line end
        if size < 0 then
          reply, next_pos = ngx.null, eol + 2
        elseif #buf >= eol + 3 + size then
          reply, next_pos = buf:sub(eol + 2, eol + 1 + size), eol + 4 + size
        end
      elseif prefix == 43 then -- +: a status
        reply, next_pos = line, eol + 2
      elseif prefix == 58 then -- :: an integer
        reply, next_pos = tonumber(line), eol + 2
      elseif prefix == 45 then -- -: the command's error
        reply, next_pos = { false, line }, eol + 2
      else
        return nil, "Redis's reply is not RESP: " .. buf:sub(pos, eol - 1)
      end
    end
    if next_pos then
      got = got + 1
      results[got] = reply
      pos = next_pos
    else
      -- An incomplete reply: what came so far, and the next bytes.
      local data, err = sock:receiveany(65536)
      if not data then return nil, err end
      buf = buf:sub(pos) .. data
      pos = 1
    end
  end
  return results
end

local function idem_write(premature)
  idem_scheduled = false
  local batch = idem_batch
  idem_batch = nil
  if batch == nil then return end
  idem_last_write = ngx.now()
  if premature then
    -- nginx reloads or stops: what waits is passed on unchecked; Redis is not to blame.
    batch.err = "nginx is exiting"
  else
    local red, err = connect()
    if red then
      -- The connection's socket, which lua-resty-redis keeps as _sock: connected, authenticated, on its db.
      local sock = rawget(red, "_sock")
      local results
      local sent
      sent, err = sock:send(resp_commands(batch))
      if sent then results, err = resp_replies(sock, batch.n) end
      if results then
        redis_answered(red)
        idem_answered()
        batch.results = results
      else
        red:close()
        err = "pipeline: " .. tostring(err)
      end
    end
    if batch.results == nil then
      batch.err = err
      idem_degraded(err)
    end
  end
  if batch.waiting > 0 then batch.sema:post(batch.waiting) end
end

--- Queues a command for this worker's next write (scheduled: at once after a quiet moment, else
--- idem_sync_s after the last); returns its batch and its place in it.
local function idem_queue(op, key, value)
  local batch = idem_batch
  if batch == nil then
    batch = { n = 0, waiting = 0 }
    idem_batch = batch
  end
  local n = batch.n + 1
  batch.n = n
  batch[n] = { op, key, value }
  if not idem_scheduled then
    local ok, err = ngx.timer.at(math.max(0, idem_last_write + idem_sync_s - ngx.now()), idem_write)
    if ok then idem_scheduled = true else ngx.log(ngx.ERR, "idempotency: cannot schedule the write of Idempotency-Keys: ", err) end
  end
  return batch, n
end

--- Sends a command with the next write and waits for its answer: the reply, or nil and why not.
local function idem_call(op, key, value)
  local batch, i = idem_queue(op, key, value)
  if batch.sema == nil then batch.sema = semaphore.new() end
  batch.waiting = batch.waiting + 1
  local ok, err = batch.sema:wait(IDEM_WAIT_S)
  if not ok then return nil, "no write of Idempotency-Keys within " .. IDEM_WAIT_S .. " s (" .. tostring(err) .. ")" end
  if batch.err then return nil, batch.err end
  local reply = batch.results[i]
  -- A command's own error in a pipeline: { false, message } (a Redis before 7.0 refuses SET NX GET).
  if type(reply) == "table" then return nil, tostring(reply[2]) end
  return reply
end

--- The kept answer of a key: "p <fingerprint>" while in flight, "d <fingerprint> <status> <body>" once answered 202.
local function replay(kept, fingerprint)
  local state, kept_fingerprint, rest = kept:match("^(%a) (%x+) ?(.*)$")
  if kept_fingerprint ~= fingerprint then
    return json_refusal(422, "idempotency_key_reused", "this Idempotency-Key was used for a request with another body; use a new key for a new request")
  end
  if state ~= "d" then
    return json_refusal(409, "idempotency_key_in_flight", "a request with this Idempotency-Key is still being answered; retry to get its answer", "1")
  end
  local status, body = rest:match("^(%d+) (.*)$")
  ngx.status = tonumber(status)
  ngx.header["Content-Type"] = "application/json"
  ngx.header["Content-Length"] = #body
  ngx.header["Idempotent-Replayed"] = "true"
  ngx.print(body)
  return ngx.exit(ngx.HTTP_OK)
end

--- The access phase for a request with an Idempotency-Key: passed on (its key now in flight), or answered here.
local function idempotency_access(bucket, key)
  if not redis_reachable() then return end
  local fingerprint = sha256_hex(request_body())
  local redis_key = IDEM_PREFIX .. bucket .. ":" .. sha256_hex(key)
  local kept, err = idem_call("reserve", redis_key, "p " .. fingerprint)
  if err then
    -- Every request that waited on a failed write gets here: said once in a while, not per request.
    if dict:add("idem_unchecked_logged", true, IDEM_UNCHECKED_LOG_S) then
      ngx.log(ngx.WARN, "idempotency: keys not checked, their requests passed on: ", err)
    end
    return
  end
  if kept == ngx.null then
    -- First seen (or its window ended just now): pass it on, and keep its answer (idempotency_done).
    ngx.var.idem_key = redis_key
    ngx.var.idem_fingerprint = fingerprint
    return
  end
  if kept:sub(1, 1) == "p" and kept:sub(3) == fingerprint then
    -- In flight, or answered since the last write and not yet kept: looked at once more, past the next
    -- write of the worker that answers it, before the 409.
    ngx.sleep(idem_recheck_s)
    local again = idem_call("get", redis_key)
    if type(again) == "string" then kept = again end
  end
  return replay(kept, fingerprint)
end

--- body_filter of /track: the service's answer of a request whose key is kept (a 202's body is small).
function M.idempotency_body()
  if ngx.var.idem_key == "" then return end
  local ctx = ngx.ctx
  ctx.idem_body = (ctx.idem_body or "") .. (ngx.arg[1] or "")
end

--- A 202 is kept as the key's answer for the rest of its window; any other answer releases the key.
function M.idempotency_done()
  local redis_key = ngx.var.idem_key
  if redis_key == nil or redis_key == "" then return end
  -- The service's status: the last of $upstream_status (the client may have gone meanwhile: 499).
  local status = tostring(ngx.var.upstream_status or ""):match("(%d+)%s*$")
  if status == "202" then
    idem_queue("keep", redis_key, "d " .. ngx.var.idem_fingerprint .. " 202 " .. (ngx.ctx.idem_body or '{"accepted":null}'))
  else
    idem_queue("release", redis_key)
  end
end

function M.access()
  local bucket, limit
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
      -- Sent as X-Api-Key-Name by nginx.conf's proxy_set_header (one variable, no header list rewritten).
      if entry.name then ngx.var.api_key_name = entry.name end
    end
  end
  if not bucket then bucket, limit = "a:" .. ngx.var.remote_addr, default_limit end
  if limit == 0 or admit(bucket, limit) then
    if idem_window_s == 0 then return end
    local key = idempotency_key()
    if key == nil then return end
    if key == false then
      return json_refusal(400, "idempotency_key_invalid", "Idempotency-Key must be 1 to 255 printable ASCII characters, quoted as the draft shows or bare")
    end
    return idempotency_access(bucket, key)
  end
  return json_refusal(429, "rate_limited", "more than " .. limit .. " requests per second for this client (its key's limit or GATEWAY_RATE_LIMIT); retry after 1 s", "1")
end

-- error_page targets: /_gateway/<status>, or /_gateway/keyed/<status> for a request with an Idempotency-Key.
local REFUSALS = {
  ["400"] = { "bad_request", "the request is not valid HTTP/1.x (malformed request line or headers, duplicate Content-Length, Content-Length with Transfer-Encoding)" },
  ["404"] = { "not_found", "no such path; POST /track takes track points" },
  ["408"] = { "request_timeout", "the request was not received in time" },
  ["413"] = { "payload_too_large", function() return "body is larger than " .. max_body_bytes .. " bytes (MAX_BODY_BYTES)" end },
  ["431"] = { "request_header_too_large", "request header fields are too large (at most 4 lines of 8 KiB)" },
  ["500"] = { "gateway_error", "the gateway failed to handle the request" },
  ["502"] = { "service_unreachable", "the ingestion service cannot be reached; retry", "1" },
  ["503"] = { "service_unavailable", "the ingestion service is not available; retry", "1" },
  ["504"] = { "service_timeout", "the ingestion service did not answer in time; retry", "1" },
}

function M.refusal()
  local status = ngx.var.uri:match("^/_gateway/[%a/]*(%d+)$") or "500"
  local refusal = REFUSALS[status] or REFUSALS["500"]
  local message = refusal[2]
  if type(message) == "function" then message = message() end
  return json_refusal(tonumber(status), refusal[1], message, refusal[3])
end

function M.not_found()
  local refusal = REFUSALS["404"]
  return json_refusal(404, refusal[1], refusal[2])
end

return M
