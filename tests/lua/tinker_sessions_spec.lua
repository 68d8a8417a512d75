-- rl.tinker.sessions (heartbeats, expiry, finish), rl.tinker.checkpoints (the tinker://
-- checkpoints on disk: listing, deleting, ids that are not checkpoints) and
-- rl.tinker.keys' key check, and rl.tinker.tokens (the JWTs the SDK trades its key for).
local rl = require "rl"
local sessions = require "rl.tinker.sessions"
local checkpoints = require "rl.tinker.checkpoints"
local keys = require "rl.tinker.keys"

local write = write_file
local exists = path_exists

describe("rl.tinker.sessions", function()
  it("a session not heard from for `timeout` seconds expires, once, and says why", function()
    local t, ended = 0, {}
    local store = sessions.new { timeout = 15, clock = function() return t end,
                                 on_end = function(s, why) ended[#ended + 1] = { s.id, why } end }
    local a, b = store:create {}, store:create { user_metadata = { k = "v" } }
    t = 10
    ok(store:get(b.id), "a heartbeat")
    ok(store:peek(a.id), "a look is not a heartbeat")
    t = 15
    eq(store:sweep(), 0)            -- exactly `timeout` seconds: still live
    t = 15.5
    eq(store:sweep(), 1)
    eq(#ended, 1)
    eq(ended[1][1], a.id)
    ok(ended[1][2]:find("expired: no heartbeat for 15.5 s", 1, true), ended[1][2])
    local s, state, why = store:get(a.id)
    eq(s, nil)
    eq(state, "ended")
    eq(why, ended[1][2])
    eq(store:list(), { b.id })
    t = 26
    eq(store:sweep(), 1)            -- b: last heard at 10
    eq(store:sweep(), 0)
    eq(#ended, 2)
    eq(select(2, store:get("session-nope")), "unknown")
  end)

  it("finish ends a session once; timeout 0 never expires one", function()
    local t, n = 0, 0
    local store = sessions.new { timeout = 0, clock = function() return t end, on_end = function() n = n + 1 end }
    local a = store:create {}
    t = 1e6
    eq(store:sweep(), 0)
    eq(store:finish(a.id, "finished (success)"), true)
    eq(store:finish(a.id, "finished (errored)"), false)
    eq(n, 1)
    eq(select(3, store:peek(a.id)), "finished (success)")
    raises(function() sessions.new { timeout = -1 } end, "session_timeout")
  end)

  it("start() sweeps on its own: a silent session ends within timeout + timeout/4", function()
    local released = nil
    local store = sessions.new { timeout = 0.4, on_end = function(s, why) released = rl.now() end }
    local t0 = rl.now()
    store:create {}
    store:start()
    local deadline = t0 + 2
    while not released and rl.now() < deadline do rl.sleep(0.02) end
    store:stop()
    ok(released, "it expired")
    ok(released - t0 >= 0.4 and released - t0 <= 0.4 + 0.1 + 0.3, ("after %.2f s"):format(released - t0))
  end)
end)

describe("rl.tinker.checkpoints", function()
  it("lists what is on disk, newest first, and deletes one for real", function()
    local dir = os.tmpname()
    os.remove(dir)
    local run = "session-1:train:0"
    write(dir .. "/" .. run .. "/weights/s1/adapter_config.json", '{"r": 4}')
    write(dir .. "/" .. run .. "/weights/s1/optimizer.pt", ("x"):rep(100))
    write(dir .. "/" .. run .. "/sampler_weights/p1/adapter_config.json", '{"r": 4}')
    write(dir .. "/" .. run .. "/sampler_weights/half/adapter_model.safetensors", "no config: not a checkpoint")
    write(dir .. "/other:train:1/weights/a/adapter_config.json", "{}")
    os.execute("touch -d '2020-01-01 00:00:00 UTC' " .. rl.process.quote(dir .. "/other:train:1/weights/a/adapter_config.json"))

    local all = assert(checkpoints.scan(dir))
    eq(#all, 3)
    eq(all[3].path, "tinker://other:train:1/weights/a")   -- the oldest last
    eq(checkpoints.json(all[3]).time, "2020-01-01T00:00:00Z")
    local mine = assert(checkpoints.scan(dir, run))
    eq(#mine, 2)
    local by_id = {}
    for _, c in ipairs(mine) do by_id[c.id] = checkpoints.json(c) end
    eq(by_id["weights/s1"].checkpoint_type, "training")
    eq(by_id["weights/s1"].size_bytes, 108)
    eq(by_id["sampler_weights/p1"].tinker_path, "tinker://" .. run .. "/sampler_weights/p1")
    eq(checkpoints.scan(dir, "nobody:train:9"), {})

    -- ids that are not checkpoints remove nothing
    for _, bad in ipairs { { "..", "weights/s1" }, { run, "weights/.." }, { run, "weights" }, { run, "other/s1" },
                           { run, "weights/s1/x" } } do
      local d, why = checkpoints.delete(dir, bad[1], bad[2])
      eq(d, nil)
      eq(why, "bad")
    end
    eq(select(2, checkpoints.delete(dir, run, "weights/nope")), "missing")
    ok(exists(dir .. "/" .. run .. "/weights/s1/optimizer.pt"))

    eq(checkpoints.delete(dir, run, "weights/s1"), dir .. "/" .. run .. "/weights/s1")
    ok(not exists(dir .. "/" .. run .. "/weights"), "the emptied kind directory went too")
    eq(#assert(checkpoints.scan(dir, run)), 1)
    ok(checkpoints.delete(dir, run, "sampler_weights/p1"))
    ok(exists(dir .. "/" .. run), "the run's directory stays while something is in it")
    rl.process.run { "rm", "-rf", dir }
  end)
end)

describe("rl.tinker.keys", function()
  it("matches only a whole key, whichever of several", function()
    local list = { "tml-first-key-0001", "tml-second-key-002" }
    ok(keys.matches("tml-second-key-002", list))
    ok(keys.matches("tml-first-key-0001", list))
    for _, bad in ipairs { "tml-second-key-00", "tml-second-key-0023", "tml-second-key-003", "", "x" } do
      ok(not keys.matches(bad, list), bad)
    end
    ok(not keys.matches(nil, list))
    ok(not keys.matches("tml-first-key-0001", {}))
  end)
end)

describe("rl.tinker.tokens", function()
  local tokens = require "rl.tinker.tokens"
  local function claims_of(jwt)
    -- base64url → bytes, the way the SDK's jwt_claims reads the middle part
    local part = jwt:match("^[^.]+%.([^.]+)%.")
    local padded = part:gsub("%-", "+"):gsub("_", "/") .. ("="):rep(-#part % 4)
    local f = assert(io.popen("printf %s " .. rl.process.quote(padded) .. " | base64 -d", "r"))
    local text = f:read("*a")
    f:close()
    return rl.json.decode(text)
  end

  it("base64url-encodes as RFC 4648 section 5 does, without padding", function()
    eq(tokens.b64url(""), "")
    eq(tokens.b64url("f"), "Zg")
    eq(tokens.b64url("fo"), "Zm8")
    eq(tokens.b64url("foo"), "Zm9v")
    eq(tokens.b64url("\255\254\253\252"), "__79_A")
  end)

  it("takes a token it issued, whole and unexpired, and nothing else", function()
    local t = 1000
    local store = tokens.new { lifetime = 60, clock = function() return t end }
    local a, b = store:issue(), store:issue()
    ok(a ~= b)
    ok(store:valid(a) and store:valid(b))
    local claims = claims_of(a)
    eq({ claims.sub, claims.org_id, claims.iat, claims.exp }, { tokens.USER, tokens.ORG, 1000, 1060 })
    local head, mid, sig = a:match("^([^.]+)%.([^.]+)%.([^.]+)$")
    ok(not store:valid(head .. "." .. mid .. "." .. sig:sub(1, -2) .. (sig:sub(-1) == "A" and "B" or "A")), "a changed secret")
    ok(not store:valid(head .. "." .. mid .. "." .. sig:sub(1, -2)), "a cut secret")
    ok(not store:valid(head .. "." .. b:match("%.([^.]+)%.") .. "." .. sig), "another token's claims")
    ok(not store:valid("tml-some-key-0001"))
    ok(not store:valid(nil))
    t = 1060
    ok(not store:valid(a), "expired")
    ok(tokens.new():valid(a) == false, "another server (a restart) knows none")
  end)
end)
