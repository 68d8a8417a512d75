-- rl.tinker.checkpoints' metadata (expiry, public) and copies, and rl.tinker.expiry:
-- a checkpoint past its time to live is deleted by the sweep, or by the listing or
-- lookup that meets it first (a clock of the test's own).
local rl = require "rl"
local checkpoints = require "rl.tinker.checkpoints"
local expiry = require "rl.tinker.expiry"

local write = write_file
local exists = path_exists

local function fresh_dir()
  local dir = os.tmpname()
  os.remove(dir)
  return dir
end

describe("rl.tinker.checkpoints metadata and copies", function()
  it("keeps expiry and public beside the files, outside the checkpoint's time and size", function()
    local dir, run = fresh_dir(), "session-1:train:0"
    local cdir = dir .. "/" .. run .. "/weights/s1"
    write(cdir .. "/adapter_config.json", '{"r": 4}')
    write(cdir .. "/optimizer.pt", ("x"):rep(100))
    os.execute("touch -d '2020-01-01 00:00:00 UTC' " .. rl.process.quote(cdir) .. "/*")
    eq(checkpoints.meta(cdir), { public = false })
    local m = assert(checkpoints.set_meta(cdir, { expires_at = 2000000000 }))
    eq(m, { expires_at = 2000000000, public = false })
    eq(assert(checkpoints.set_meta(cdir, { public = true })), { expires_at = 2000000000, public = true })
    local c = assert(checkpoints.scan(dir))[1]
    local j = checkpoints.json(c)
    eq(j.size_bytes, 108)
    eq(j.time, "2020-01-01T00:00:00Z")
    eq(j.public, true)
    eq(j.expires_at, checkpoints.iso_time(2000000000))
    eq(assert(checkpoints.set_meta(cdir, { expires_at = false })).expires_at, nil)
    eq(checkpoints.json(assert(checkpoints.scan(dir))[1]).expires_at, nil)
    write(cdir .. "/" .. checkpoints.META, "not json")
    eq(checkpoints.meta(cdir), { public = false })   -- a damaged file: nothing set
    rl.process.run { "rm", "-rf", dir }
  end)

  it("copies the files, not the metadata, and never onto a checkpoint that exists", function()
    local dir, run = fresh_dir(), "session-1:train:0"
    local src = dir .. "/" .. run .. "/sampler_weights/p1"
    write(src .. "/adapter_config.json", '{"r": 4}')
    write(src .. "/adapter_model.safetensors", "weights")
    assert(checkpoints.set_meta(src, { expires_at = 1, public = true }))
    eq(checkpoints.copy(dir, src, "copy-1", "sampler_weights", "p1"), "tinker://copy-1/sampler_weights/p1")
    local dst = dir .. "/copy-1/sampler_weights/p1"
    eq(require("rl._fs").read_file(dst .. "/adapter_model.safetensors"), "weights")
    ok(not exists(dst .. "/" .. checkpoints.META), "the copy starts private, with no expiry")
    local path, why = checkpoints.copy(dir, src, "copy-1", "sampler_weights", "p1")
    eq(path, nil)
    eq(why, "exists")
    eq(select(2, checkpoints.copy(dir, src, "../x", "sampler_weights", "p1")), "bad")
    eq(select(2, checkpoints.copy(dir, src, "copy-2", "weights", "..")), "bad")
    local left = select(2, rl.process.run { "find", dir, "-name", ".copying-*" })
    eq(left, "")   -- no half copy stays behind
    eq(#assert(checkpoints.scan(dir)), 2)
    rl.process.run { "rm", "-rf", dir }
  end)
end)

describe("rl.tinker.expiry", function()
  it("deletes a checkpoint once due: at a lookup, a listing, or the sweep", function()
    local dir, run, t, forgot = fresh_dir(), "session-1:train:0", 1000, {}
    local function ckpt(name, at)
      local cdir = dir .. "/" .. run .. "/weights/" .. name
      write(cdir .. "/adapter_config.json", "{}")
      if at then assert(checkpoints.set_meta(cdir, { expires_at = at })) end
      return cdir
    end
    local a, b, c, keep = ckpt("a", 1010), ckpt("b", 1020), ckpt("c", 1030), ckpt("keep")
    local ex = expiry.new { dir = dir, clock = function() return t end,
                            on_delete = function(cdir) forgot[#forgot + 1] = cdir end }
    -- before the first sweep read the index, a lookup asks the metadata
    eq(ex:expired(a), false)
    t = 1010
    eq(ex:expired(a), true)
    ok(not exists(a), "a's files are gone")
    eq(forgot, { a })
    eq(ex:sweep(), 0)                  -- reads the index: b and c are not due yet
    t = 1025
    local listed = ex:filter(assert(checkpoints.scan(dir)))
    eq(#listed, 2)                     -- c and keep; b went at the listing
    ok(not exists(b))
    t = 1030
    eq(ex:sweep(), 1)                  -- c, with nobody asking
    ok(not exists(c))
    ok(exists(keep))
    eq(#forgot, 3)
    -- a new expiry replaces the old; none removes it
    ex:note({ dir = keep, run = run, id = "weights/keep", path = "tinker://x", expires_at = 1040 })
    ex:note({ dir = keep, run = run, id = "weights/keep", path = "tinker://x" })
    t = 5000
    eq(ex:sweep(), 0)
    ok(exists(keep))
    rl.process.run { "rm", "-rf", dir }
  end)
end)
