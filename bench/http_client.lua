-- rlhost's HTTP client throughput: `inflight` tasks, each sending GETs in a
-- loop (closed loop) until `requests` responses have arrived. Run by
-- bench/http_bench.sh against a local nginx; prints one RESULT line.
--
--   rlhost bench/http_client.lua URL INFLIGHT REQUESTS [WARMUP]
local rl = require "rl"

local url, inflight, requests, warmup = rl.argv[1], tonumber(rl.argv[2]), tonumber(rl.argv[3]), tonumber(rl.argv[4])
if not (url and inflight and requests) then
  io.stderr:write("usage: rlhost bench/http_client.lua URL INFLIGHT REQUESTS [WARMUP]\n")
  rl.exit(2)
end
warmup = warmup or inflight * 4

-- One connection per in-flight request, as the httpx peer is configured.
rl.http.configure { max_per_host = inflight, max_connections = inflight * 2, timeout = 60 }

local function run(total)
  local sent, bad = 0, 0
  local workers = {}
  for w = 1, inflight do
    workers[w] = rl.spawn(function()
      while sent < total do
        sent = sent + 1
        local r, err = rl.http.get(url)
        if not r then error(err) end
        if r.status ~= 200 or #r.body == 0 then bad = bad + 1 end
      end
    end)
  end
  rl.wait_all(workers)
  return sent, bad
end

run(warmup)  -- opens the connections
local c0 = rl.http.stats().connections_opened
local t0, cpu0 = rl.now(), os.clock()
local n, bad = run(requests)
local secs, cpu = rl.now() - t0, os.clock() - cpu0
if bad > 0 then error(bad .. " bad responses") end
print(("RESULT client=rlhost inflight=%d requests=%d seconds=%.3f rps=%.0f cpu_s=%.3f new_connections=%d")
  :format(inflight, n, secs, n / secs, cpu, rl.http.stats().connections_opened - c0))
