-- The gateway's own logic (nginx.conf.template): the rate limit shared through Redis, and the
-- gateway's refusals in the service's error shape {"error": code, "message": text}.
--
-- Every code answered here is in the service's error catalogue (src/errors.ts), with the same status
-- and Retry-After; a test holds this file to it.
--
-- Rate limit: GATEWAY_RATE_LIMIT requests per second per client key (0 turns it off). The key is
-- X-Api-Key when the client sends one (a fleet's devices often share one address behind carrier NAT),
-- else the client address. Counted in fixed one-second windows: INCR rl:<key>:<unix second> in the
-- Redis of REDIS_URL, which every gateway instance shares, so two instances enforce one limit.
--
-- When Redis cannot be reached the gateway keeps serving: each instance counts on its own (an nginx
-- shared dict, common to its workers) until Redis answers again, so the limit holds per instance, N
-- times the limit across N instances, rather than refusing every device because a counter store is
-- down. Redis is tried again at most once a second meanwhile, with 50 ms timeouts, so an outage adds
-- no latency to requests; the change is logged once each way.
local redis = require "nginx.redis"

local M = {}

local dict = ngx.shared.track_gateway
local limit = 0
local max_body_bytes = "MAX_BODY_BYTES"
local redis_host, redis_port, redis_password, redis_db, redis_label
local REDIS_TIMEOUT_MS = 50
local REDIS_RETRY_S = 1
local REDIS_POOL_SIZE = 64
local REDIS_IDLE_MS = 30000

local function fail(message)
  error("track_gateway: " .. message, 0)
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
  local value = os.getenv("GATEWAY_RATE_LIMIT") or "1000"
  if not value:match("^%d+$") then fail("GATEWAY_RATE_LIMIT must be a whole number of requests per second (0: off), got " .. value) end
  limit = tonumber(value)
  max_body_bytes = os.getenv("MAX_BODY_BYTES") or max_body_bytes
  redis_host, redis_port, redis_password, redis_db, redis_label = parse_redis_url(os.getenv("REDIS_URL") or "redis://127.0.0.1:6379")
end

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

--- The count of this window in Redis, or nil and why not.
local function count_in_redis(key)
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
  local n
  n, err = red:incr(key)
  if type(n) ~= "number" then
    red:close()
    return nil, "INCR: " .. tostring(err)
  end
  -- The window's first request sets its expiry; the others cost one round trip, not two.
  if n == 1 then
    ok, err = red:expire(key, 2)
    if not ok then red:close() return nil, "EXPIRE: " .. tostring(err) end
  end
  red:set_keepalive(REDIS_IDLE_MS, REDIS_POOL_SIZE)
  return n
end

local function count(key)
  if not dict:get("redis_retry_later") then
    local n, err = count_in_redis(key)
    if n then
      if dict:get("redis_degraded") then
        dict:delete("redis_degraded")
        ngx.log(ngx.WARN, "rate limit: ", redis_label, " answers again; limits are shared by every gateway instance")
      end
      return n
    end
    dict:set("redis_retry_later", true, REDIS_RETRY_S)
    if dict:add("redis_degraded", true) then
      ngx.log(ngx.ERR, "rate limit: ", redis_label, " cannot be reached (", err, "); counting per gateway instance until it answers")
    end
  end
  -- incr with an initial value and a time to live: the window's counter of this instance.
  local n = dict:incr(key, 1, 0, 2)
  return n or 0
end

function M.rate_limit()
  if limit == 0 then return end
  local api_key = ngx.var.http_x_api_key
  local client = (api_key and api_key ~= "") and ("k:" .. ngx.md5(api_key)) or ("a:" .. ngx.var.remote_addr)
  if count("rl:" .. client .. ":" .. ngx.time()) > limit then
    return json_refusal(429, "rate_limited", "more than " .. limit .. " requests per second for this client (GATEWAY_RATE_LIMIT); retry after 1 s", "1")
  end
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
