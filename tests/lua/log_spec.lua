local rl = require "rl"
local log = rl.log

describe("rl.log level", function()
  local saved
  before_each(function() saved = log.level() end)

  it("gets and sets the level by name", function()
    eq(type(log.level()), "string")
    eq(log.level("debug"), "debug")
    eq(log.level(), "debug")
    eq(log.level("trace"), "trace")
    eq(log.level("ERROR"), "error", "names are case-insensitive")
    eq(log.level("critical"), "critical")
    eq(log.level("off"), "off")
    eq(log.level("info"), "info")
    log.level(saved)
  end)

  it("warn and warning are the same level", function()
    eq(log.level("warn"), "warning")
    eq(log.level("warning"), "warning")
    log.level(saved)
  end)

  it("an unknown level is an error naming the accepted ones", function()
    raises(function() log.level("loud") end,
      "rl.log.level: bad argument #1 'level' (unknown level 'loud'; expected trace, debug, info, warn, error, critical or off)")
    raises(function() log.level(3) end, "rl.log.level")
    eq(log.level(), saved, "the level is unchanged")
  end)
end)

describe("rl.log records", function()
  local saved
  before_each(function() saved = log.level() end)

  it("every level function exists and returns nothing", function()
    log.level("off")  -- keep the test output clean; formatting still runs below
    for _, name in ipairs { "trace", "debug", "info", "warn", "error" } do
      eq(type(log[name]), "function", name)
      eq(select("#", log[name]("record at %s", name)), 0)
    end
    log.level(saved)
  end)

  it("bad format strings and odd arguments never raise", function()
    log.level("trace")
    log.level("critical")  -- records below critical are dropped before formatting
    log.info("%d", "not a number")
    log.level("trace")
    log.debug("%d %s", "not a number")              -- a bad argument
    log.debug("%s %s %s", 1)                        -- too few arguments
    log.debug("%q %z", "x")                         -- an invalid conversion
    log.debug("no args, stray %d and %s")           -- no arguments: the text as is
    log.debug(nil)                                  -- not a string at all
    log.debug({}, 1, 2)
    log.debug("%s", nil)
    log.debug(42)
    log.debug("%s", setmetatable({}, { __tostring = function() return "custom" end }))
    log.debug("binary \0 and invalid utf-8 \255 are fine")
    log.level(saved)
  end)

  it("works inside nested tasks", function()
    log.level("off")
    local t = rl.spawn(function()
      log.info("from a task %d", rl.current_task().id)
      return true
    end)
    eq(t:wait(), true)
    log.level(saved)
  end)
end)
