-- One request shape per run, from the environment (set by bench/run.py):
--   BENCH_METHOD   GET or POST
--   BENCH_HEADERS  "Name: value" lines separated by "\n"
--   BENCH_BODY     request body; every "@ID@" becomes an id unique to this request
--   BENCH_ID_PREFIX  prefix of those ids (unique per run, so runs never collide)
--   BENCH_REPORT   file the summary is written to as JSON (latencies in microseconds)
--   BENCH_EXPECT   substring every response body must contain (else counted in "unexpected")
local method = os.getenv("BENCH_METHOD") or "GET"
local body = os.getenv("BENCH_BODY") or ""
local prefix = os.getenv("BENCH_ID_PREFIX") or "bench"
local expect = os.getenv("BENCH_EXPECT") or ""
local fresh = body:find("@ID@", 1, true) ~= nil
local headers = {}
for line in (os.getenv("BENCH_HEADERS") or ""):gmatch("[^\n]+") do
  local name, value = line:match("^([^:]+):%s*(.*)$")
  if name then headers[name] = value end
end

local threads = {}
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local counter = 0
local fixed = nil
unexpected = 0

function init(args)
  if not fresh then
    fixed = wrk.format(method, nil, headers, body ~= "" and body or nil)
  end
end

function request()
  if fixed then return fixed end
  counter = counter + 1
  local id = prefix .. "-" .. thread_id .. "-" .. counter
  return wrk.format(method, nil, headers, (body:gsub("@ID@", id)))
end

function response(status, hdrs, resp_body)
  if expect ~= "" and not resp_body:find(expect, 1, true) then
    unexpected = unexpected + 1
  end
end

function done(summary, latency, requests)
  local bad = 0
  for _, thread in ipairs(threads) do bad = bad + (thread:get("unexpected") or 0) end
  local e = summary.errors
  local out = string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "errors": {"connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}, "unexpected": %d, "latency_us": {"mean": %.1f, ' ..
    '"max": %d, "p50": %d, "p90": %d, "p99": %d, "p999": %d}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, bad, latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9))
  local path = os.getenv("BENCH_REPORT")
  if path then
    local f = assert(io.open(path, "w"))
    f:write(out)
    f:close()
  else
    io.write(out)
  end
end
