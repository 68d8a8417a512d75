-- --sglang-config files as a careless or hostile user writes them (issue 40): the YAML
-- reader (rl._yaml) is linear, bounds its messages and its nesting, and refuses a key
-- given twice, in block and flow mappings alike; JSON configs refuse duplicate keys and
-- say why they are malformed; Lua configs are source text only (LuaJIT bytecode is
-- refused, never run), run with no globals and a step budget; a config where every
-- model is frozen is an error. Then bounded mutation fuzzing of both readers from the
-- seeds in tests/fuzz/corpus/sglang_config (tests/fuzz/make_corpus.py): every input
-- gives a value or a message naming the file, never another error.
local rl = require "rl"
local yaml = require "rl._yaml"
local engines = require "rl.recipe.engines"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local files = dofile(HERE .. "/support/config_files.lua")
local usage_msg, config = files.usage_msg, files.config

local function load_msg(name, text) return usage_msg(function() engines.load_config(config(name, text), "/m") end) end

describe("rl._yaml", function()
  it("a key twice is an error naming the line, in flow mappings too", function()
    local v, err = yaml.parse("sglang:\n  - name: a\n    server_groups: [{num_gpus: 1, num_gpus: 1000}]\n", "g.yaml")
    eq(v, nil)
    eq(err, "g.yaml:3: key 'num_gpus' appears twice in {...}")
    v, err = yaml.parse("a: {b: {c: 1, 'c': 2}}\n", "g.yaml")
    eq(err, "g.yaml:1: key 'c' appears twice in {...}")
    v, err = yaml.parse("a:\n  b: 1\n  b:\n", "g.yaml")
    eq(err, "g.yaml:3: key 'b' appears twice")
    eq(yaml.parse("a: {b: 1, c: {b: 2}}\n"), { a = { b = 1, c = { b = 2 } } })
  end)

  it("is linear on long runs of blanks, and quotes at most a short excerpt", function()
    local run = string.rep(" ", 2 ^ 20)   -- (quadratic, one such line took hours)
    for _, text in ipairs {
      "sglang:\n  - name: a" .. run .. "x" .. run .. "\n    server_groups: [{num_gpus: 1}]\n  bad" .. run .. "line\n",
      "key" .. run .. "x" .. run .. "\n",
      "a: {" .. run .. "k" .. run .. ": 1," .. run .. "k" .. run .. ": 2}\n",
      "a: [" .. run .. "x" .. run .. "\n",
      "a: '" .. run .. "\n",
      "- " .. string.rep("- ", 2 ^ 18) .. "x\n",
      string.rep("a:" .. run:sub(1, 1000) .. "\n", 2000),
    } do
      local v, err = yaml.parse(text, "big.yaml")
      if v == nil then
        ok(err:match("^big%.yaml:%d+: ") or err:match("^big%.yaml: "), err:sub(1, 200))
        ok(#err < 300, "a bounded message, got " .. #err .. " bytes: " .. err:sub(1, 200))
      end
    end
    local v, err = yaml.parse("a: 1\n" .. string.rep("x", 100000) .. "\n", "g.yaml")
    ok(v == nil and #err < 300 and err:find("g.yaml:2: expected 'key: value' (got '" .. string.rep("x", 57) .. "...')",
      1, true), tostring(err):sub(1, 300))
    v, err = yaml.parse("a: {" .. string.rep("k", 100000) .. ": 1, " .. string.rep("k", 100000) .. ": 2}\n", "g.yaml")
    ok(v == nil and #err < 300 and err:find("g.yaml:1: key 'kkk", 1, true), tostring(err):sub(1, 300))
  end, { timeout = 240 })   -- (a bound for a loaded machine: linear, this takes well under a second of CPU)

  it("deep nesting is an error naming the line, not a stack overflow", function()
    local _, err = yaml.parse("a: " .. string.rep("[", 100000) .. "\n", "deep.yaml")
    eq(err, "deep.yaml:1: nested deeper than 128 levels")
    _, err = yaml.parse("a: " .. string.rep("{b: ", 5000) .. "\n", "deep.yaml")
    eq(err, "deep.yaml:1: nested deeper than 128 levels")
    local lines = { "a:" }
    for i = 1, 3000 do lines[#lines + 1] = string.rep(" ", i) .. "k:" end
    _, err = yaml.parse(table.concat(lines, "\n") .. "\n", "deep.yaml")
    ok(err:match("^deep%.yaml:%d+: nested deeper than 128 levels$"), err)
    _, err = yaml.parse(string.rep("- ", 50000) .. "x\n", "deep.yaml")
    eq(err, "deep.yaml:1: nested deeper than 128 levels")
    eq(yaml.parse("a: [[[1]]]\n"), { a = { { { 1 } } } })
  end)
end)

describe("rl.recipe.engines.load_config: malformed and hostile files", function()
  it("YAML: a duplicate key in a flow mapping names file and line", function()
    local msg = load_msg("g.yaml", "sglang:\n  - name: actor\n    server_groups: [{num_gpus: 1, num_gpus: 1000}]\n")
    ok(msg:find("%-%-sglang%-config .*/g%.yaml:3: key 'num_gpus' appears twice"), msg)
  end)

  it("JSON: duplicate keys and malformed text say where", function()
    local msg = load_msg("g.json", '{"sglang": [{"name": "a", "server_groups": [{"num_gpus": 1, "num_gpus": 1000}]}]}')
    ok(msg:find("key 'num_gpus' appears twice", 1, true) and msg:find("sglang[0].server_groups[0]", 1, true), msg)
    msg = load_msg("g.json", '{"sglang": [{"name": "a",, }]}')
    ok(msg:find("bad JSON: ", 1, true) and not msg:find("nil", 1, true) and msg:find("line 1", 1, true), msg)
    msg = load_msg("g.json", "null")
    ok(msg:find("bad JSON: the file holds null", 1, true), msg)
  end)

  it("Lua: source text only; bytecode, damaged or not, is refused and never run", function()
    local chunk = string.dump(function() return { sglang = { { name = "a", server_groups = { { num_gpus = 1 } } } } } end)
    local msg = load_msg("g.lua", chunk)
    ok(msg:find("g.lua: is LuaJIT bytecode; give the Lua source text", 1, true), msg)
    for i = 6, #chunk, 7 do   -- damaged bytecode crashed the process when it was loaded
      local bad = chunk:sub(1, i - 1) .. string.char((chunk:byte(i) + 97) % 256) .. chunk:sub(i + 1)
      msg = load_msg("g.lua", bad)
      ok(msg:find("is LuaJIT bytecode", 1, true), msg)
    end
  end)

  it("Lua: no globals, and a file that never returns is stopped", function()
    local msg = load_msg("g.lua", "while true do end\n")
    ok(msg:find("ran more than %d+ Lua instructions without returning"), msg)
    msg = load_msg("g.lua", "local t = {}\nrepeat t[#t + 1] = 1 until false\n")
    ok(msg:find("without returning", 1, true), msg)
    msg = load_msg("g.lua", "os.execute('touch /tmp/rlhost-config-ran')\nreturn {}\n")
    ok(msg:find("g.lua:1: attempt to index global 'os'", 1, true), msg)
    msg = load_msg("g.lua", "return {sglang = {{name = 'a', server_groups = {{num_gpus = 1}}}}\n")   -- a } missing
    ok(msg:find("g%.lua:%d+: .*expected"), msg)
  end)

  it("a config whose models are all frozen is refused: nothing would serve the trained policy", function()
    local msg = load_msg("g.yaml", "sglang:\n  - name: ref\n    update_weights: false\n    server_groups: [{num_gpus: 1}]\n"
      .. "  - name: judge\n    model_path: /elsewhere\n    server_groups: [{num_gpus: 1}]\n")
    ok(msg:find("no model takes the trainer's weights: ref, judge are all frozen", 1, true), msg)
  end)
end)

-- ---- fuzzing --------------------------------------------------------------------------------

local CORPUS = HERE .. "/../fuzz/corpus/sglang_config"
local TOKENS = { "{", "}", "[", "]", ":", ": ", ",", "- ", "-", "#", "'", '"', "\\", "\n", "\t", " ", "&a", "*a",
                 "!!str", "|", ">", "---", "...", "~", "null", "1e999", "-0", "nan", "\0", "\xff", "num_gpus: ",
                 "  ", string.rep(" ", 3000), string.rep("[", 300), string.rep("{a: ", 200), "\r\n", "server_groups:" }

local function seeds()
  local out = {}
  local p = assert(io.popen("ls '" .. CORPUS .. "'"))
  for name in p:lines() do out[#out + 1] = { name = name, text = assert(read_file(CORPUS .. "/" .. name)) } end
  p:close()
  ok(#out >= 5, "the seeds in " .. CORPUS)
  return out
end

local function mutate(s, rnd)
  for _ = 1, rnd(6) do
    local at = rnd(#s + 1)
    local op = rnd(7)
    if op == 1 and #s > 0 then
      local i = rnd(#s)
      s = s:sub(1, i - 1) .. string.char(rnd(256) - 1) .. s:sub(i + 1)
    elseif op == 2 then
      s = s:sub(1, at - 1) .. TOKENS[rnd(#TOKENS)] .. s:sub(at)
    elseif op == 3 then
      s = s:sub(1, at - 1) .. s:sub(at + rnd(20))
    elseif op == 4 then   -- a line again (duplicate keys)
      local a, b = s:find("[^\n]*\n", at)
      if a then s = s:sub(1, b) .. s:sub(a, b) .. s:sub(b + 1) end
    elseif op == 5 then
      local a = rnd(#s + 1)
      s = s:sub(1, at - 1) .. s:sub(a, a + rnd(40)) .. s:sub(at)
    elseif op == 6 then   -- indentation changed
      s = s:gsub("\n(  +)", function(sp) return rnd(4) == 1 and ("\n" .. sp:sub(2)) or nil end)
    else
      s = s:sub(1, at - 1) .. string.rep(" ", rnd(64)) .. s:sub(at)
    end
  end
  return s
end

describe("fuzzing the config readers", function()
  it("every mutated config gives a value or a usage error naming the file, never another error", function()
    local all = seeds()
    math.randomseed(20261126)
    local rnd = math.random
    local budget = tonumber(os.getenv("RLHOST_FUZZ_SECONDS") or "") or 4
    local t0, n, dir = rl.now(), 0, tmpdir(true)
    local level = rl.log.level()
    rl.log.level("error")   -- (load_config warns about frozen defaults: thousands of lines otherwise)
    while (n < 300 or rl.now() - t0 < budget) and n < 20000 do
      n = n + 1
      local seed = all[rnd(#all)]
      local text = mutate(seed.text, rnd)
      local path = dir .. "/" .. seed.name
      write_file(path, text)
      if seed.name:match("%.yaml$") then
        local okk, v, err = pcall(yaml.parse, text, path)
        if not okk or (v == nil and (type(err) ~= "string" or err:sub(1, #path) ~= path)) then
          write_file("fuzz-finding-yaml.bin", text)
          error(("yaml input %d: %s"):format(n, tostring(okk and err or v)))
        end
      end
      local okk, err = pcall(engines.load_config, path, "/models/ref")
      if not okk and not rl.args.is_usage_error(err) then
        write_file("fuzz-finding-config.bin", text)
        error(("config input %d (%s): not a usage error: %s"):format(n, seed.name, tostring(err)))
      end
      if not okk then
        ok(err.message:find(path, 1, true), err.message)
        ok(#err.message < 2000, "a bounded message: " .. err.message:sub(1, 200))
      end
    end
    rl.log.level(level)
    io.stderr:write(("fuzzed %d config inputs\n"):format(n))
  end, { timeout = 240 })
end)
