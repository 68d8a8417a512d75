-- rl.tinker.futures: request ids, long polls, seq_id order per lane, idempotency keys,
-- user and server errors.
local rl = require "rl"
local futures = require "rl.tinker.futures"

describe("rl.tinker.futures", function()
  it("runs a lane's calls in seq_id order whatever order they arrive in", function()
    local store = futures.new { poll = 5 }
    local ran = {}
    local ids = {}
    for _, seq in ipairs { 3, 2, 4, 1 } do
      ids[seq] = store:submit(function()
        ran[#ran + 1] = seq
        rl.sleep(0.01)
        return { body = { seq = seq } }
      end, { lane = "m", seq = seq })
    end
    for seq = 1, 4 do
      local e = store:wait(ids[seq])
      eq(e.state, "done")
      eq(e.result.body.seq, seq)
    end
    eq(table.concat(ran, ","), "1,2,3,4")
  end)

  it("two lanes run side by side; a call without a lane runs at once", function()
    local store = futures.new {}
    local a = store:submit(function() rl.sleep(0.2) return { body = "a" } end, { lane = "x", seq = 1 })
    local b = store:submit(function() return { body = "b" } end, { lane = "y", seq = 1 })
    local c = store:submit(function() return { body = "c" } end)
    eq(store:wait(b).result.body, "b")
    eq(store:wait(c).result.body, "c")
    eq(store:get(a).state ~= "done", true)
    eq(store:wait(a).result.body, "a")
  end)

  it("a missing seq_id holds its lane only gap_wait seconds", function()
    local store = futures.new { gap_wait = 0.2 }
    local id = store:submit(function() return { body = "late" } end, { lane = "m", seq = 5 })
    local t0 = rl.now()
    eq(store:wait(id, 5).result.body, "late")
    ok(rl.now() - t0 >= 0.15, "it waited for seq 1..4")
  end)

  it("a poll ends at its timeout with the request still running", function()
    local store = futures.new {}
    local id = store:submit(function() rl.sleep(0.5) return { body = 1 } end)
    local e = store:wait(id, 0.05)
    ok(e.state ~= "done")
    eq(store:wait(id, 5).state, "done")
    eq(store:wait("req-nope"), nil)
  end)

  it("an idempotency key gives the first request's id, and runs the work once", function()
    local store = futures.new {}
    local runs = 0
    local work = function() runs = runs + 1 return { body = runs } end
    local a = store:submit(work, { key = "k1" })
    local b = store:submit(work, { key = "k1" })
    eq(a, b)
    store:wait(a)
    eq(runs, 1)
  end)

  it("'user: ...' errors are the client's, anything else the server's", function()
    local store = futures.new {}
    local u = store:submit(function() error("user: bad target_tokens", 0) end)
    local s = store:submit(function() error("boom") end)
    local ue, se = store:wait(u).result, store:wait(s).result
    eq(ue.category, "user")
    eq(ue.error, "bad target_tokens")
    eq(se.category, "server")
    ok(se.error:find("boom", 1, true), se.error)
  end)

  it("forgets results `keep` seconds after they finished, oldest first, with their idempotency keys", function()
    local t = 0
    local store = futures.new { keep = 10, clock = function() return t end }
    local first = store:submit(function() return { body = "first" } end, { key = "k-first" })
    eq(store:wait(first).result.body, "first")               -- done at t = 0
    t = 5
    local running = store:submit(function() rl.sleep(0.3) return { body = "slow" } end)
    local second = store:submit(function() return { body = "second" } end, { key = "k-second" })
    eq(store:wait(second).result.body, "second")             -- done at t = 5
    t = 10
    store:submit(function() return {} end)
    ok(store:get(first), "kept for exactly `keep` seconds")
    t = 10.5
    store:submit(function() return {} end)
    eq(store:get(first), nil)
    ok(store:get(second) and store:get(running), "the later result and the running call stay")
    -- the key of a forgotten result names a new request; the kept one's still the first
    local again = store:submit(function() return { body = "again" } end, { key = "k-first" })
    ok(again ~= first)
    eq(store:submit(function() return {} end, { key = "k-second" }), second)
    t = 100                                                  -- the slow call finishes at t = 100
    eq(store:wait(running).result.body, "slow")
    store:submit(function() return {} end)
    eq(store:get(second), nil)
    ok(store:get(running), "kept `keep` seconds from when it finished, not from when it came")
  end)

  it("a submit's expiry looks only at what is due (20000 kept results cost nothing)", function()
    local t = 0
    local store = futures.new { keep = 50, clock = function() return t end }
    local n = 20000
    for _ = 1, n do store:submit(function() return {} end) end
    while store:counts().done < n do rl.sleep(0.01) end   -- let them finish
    -- a scan of every kept result per submit would look at n * n = 4e8 entries here
    local t0 = rl.now()
    for _ = 1, n do store:submit(function() return {} end) end
    rl.sleep(0)
    local took = rl.now() - t0
    ok(took < 5, ("%d submits beside %d kept results took %.1f s"):format(n, n, took))
    while store:counts().done < 2 * n do rl.sleep(0.01) end
    t = 51
    store:submit(function() return {} end)
    while store:counts().done < 1 do rl.sleep(0.01) end
    eq(store:counts().done, 1)   -- the 2n due ones went at once; the new one stays
  end)
end)
