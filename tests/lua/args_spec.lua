local rl = require "rl"

-- The spec from the rl.args documentation, used by most tests.
local function spec()
  return {
    description = "GRPO on GSM8K",
    prog = "grpo.lua",
    { name = "rollout_batch_size", type = "int", default = 32, help = "prompts per rollout step" },
    { name = "lr", type = "number", default = 1e-6, help = "learning rate" },
    { name = "use_kl_loss", type = "bool", default = false, help = "add the KL loss" },
    { name = "eval_datasets", type = "list", of = "string", default = {} },
    { name = "eval_ids", type = "list", of = "int", default = { 1, 2 } },
    { name = "weights", type = "list", of = "number" },
    { name = "advantage_estimator", type = "string", choices = { "grpo", "reinforce_plus_plus" }, default = "grpo" },
    { name = "model_path", type = "string", required = true },
    { name = "dump", positional = true, type = "string", help = "dump file to read" },
  }
end

local function parse(argv, s)
  return rl.args.parse(s or spec(), argv)
end

-- Parses, expecting a usage error that contains `pattern`; returns the message.
local function usage(argv, pattern, s)
  local v, err, kind = parse(argv, s)
  eq(v, nil, "parse should fail for " .. table.concat(argv, " "))
  eq(kind, "usage")
  ok(err:find(pattern, 1, true), "'" .. tostring(err) .. "' does not contain '" .. pattern .. "'")
  return err
end

local M = { "--model-path", "m" }  -- the one required option
local function with_model(...)
  local t = { ... }
  t[#t + 1] = "--model-path"
  t[#t + 1] = "m"
  return t
end

describe("rl.args values", function()
  it("uses the defaults and returns snake_case keys", function()
    local o = parse(M)
    eq(o.rollout_batch_size, 32)
    eq(o.lr, 1e-6)
    eq(o.use_kl_loss, false)
    eq(o.eval_datasets, {})
    eq(o.eval_ids, { 1, 2 })
    eq(o.weights, {})
    eq(o.advantage_estimator, "grpo")
    eq(o.model_path, "m")
    eq(o.dump, nil)
  end)

  it("accepts --flag value and --flag=value", function()
    eq(parse(with_model("--rollout-batch-size", "16")).rollout_batch_size, 16)
    eq(parse(with_model("--rollout-batch-size=16")).rollout_batch_size, 16)
    eq(parse(with_model("--lr", "3e-4")).lr, 3e-4)
    eq(parse(with_model("--lr=-0.5")).lr, -0.5)
    eq(parse(with_model("--lr", "-2")).lr, -2, "a negative number is a value, not a flag")
    eq(parse({ "--model-path=a=b" }).model_path, "a=b", "only the first '=' splits")
    eq(parse({ "--model-path=" }).model_path, "", "an empty value")
  end)

  it("accepts snake_case spellings as aliases", function()
    local o = parse({ "--rollout_batch_size", "8", "--model_path", "x", "--use_kl_loss", "--eval_datasets=a" })
    eq(o.rollout_batch_size, 8); eq(o.model_path, "x"); eq(o.use_kl_loss, true); eq(o.eval_datasets, { "a" })
    eq(parse(with_model("--use-kl-loss", "--no_use_kl_loss")).use_kl_loss, false)
  end)

  it("the last of repeated scalar flags wins", function()
    eq(parse(with_model("--rollout-batch-size", "1", "--rollout-batch-size", "2")).rollout_batch_size, 2)
  end)

  it("reads integers strictly", function()
    eq(parse(with_model("--rollout-batch-size", "+7")).rollout_batch_size, 7)
    eq(parse(with_model("--rollout-batch-size", "-3")).rollout_batch_size, -3)
    eq(parse(with_model("--rollout-batch-size", "1e3")).rollout_batch_size, 1000)
    usage(with_model("--rollout-batch-size", "1.5"), "--rollout-batch-size: expected an integer, got '1.5'")
    usage(with_model("--rollout-batch-size", "0x10"), "expected an integer, got '0x10'")
    usage(with_model("--rollout-batch-size="), "expected an integer, got ''")
  end)

  it("reads numbers, rejecting NaN", function()
    eq(parse(with_model("--lr", "1")).lr, 1)
    eq(parse(with_model("--lr", ".5")).lr, 0.5)
    usage(with_model("--lr", "abc"), "--lr: expected a number, got 'abc'")
    usage(with_model("--lr", "nan"), "--lr: expected a number, got 'nan'")
  end)
end)

describe("rl.args bools", function()
  it("--flag, --no-flag and --flag=VALUE", function()
    eq(parse(with_model("--use-kl-loss")).use_kl_loss, true)
    eq(parse(with_model("--use-kl-loss", "--no-use-kl-loss")).use_kl_loss, false)
    for _, w in ipairs { "true", "TRUE", "1", "yes", "on" } do
      eq(parse(with_model("--use-kl-loss=" .. w)).use_kl_loss, true, w)
    end
    for _, w in ipairs { "false", "False", "0", "no", "off" } do
      eq(parse(with_model("--use-kl-loss=" .. w)).use_kl_loss, false, w)
    end
  end)

  it("a bool without a default is false", function()
    local o = parse({}, { { name = "verbose", type = "bool" } })
    eq(o.verbose, false)
  end)

  it("rejects bad bool values and values after --no-", function()
    usage(with_model("--use-kl-loss=maybe"), "--use-kl-loss: expected a boolean (true or false), got 'maybe'")
    usage(with_model("--no-use-kl-loss=true"), "'--no-use-kl-loss=true' takes no value")
    usage(with_model("--use-kl-loss", "false"), "--use-kl-loss takes no separate value; write --use-kl-loss=false")
  end)

  it("hints at --flag=VALUE for a stray bool word", function()
    usage({ "--use-kl-loss", "no", "--model-path", "m", "x.pt" },
      "unexpected argument 'x.pt'")
    usage({ "--flag", "no" }, "unexpected argument 'no'; --flag takes no separate value, write --flag=no",
      { { name = "flag", type = "bool" } })
  end)

  it("--no- only applies to bools", function()
    usage(with_model("--no-lr"), "'--no-lr': only bool options have a --no- form; --lr takes a number")
  end)
end)

describe("rl.args lists", function()
  it("takes the values up to the next flag", function()
    local o = parse({ "--eval-datasets", "a", "b", "c", "--model-path", "m" })
    eq(o.eval_datasets, { "a", "b", "c" })
    eq(o.model_path, "m")
  end)

  it("takes comma-separated values after =", function()
    eq(parse(with_model("--eval-datasets=a,b,c")).eval_datasets, { "a", "b", "c" })
    eq(parse(with_model("--eval-datasets=")).eval_datasets, {}, "--x= is the empty list")
    eq(parse(with_model("--eval-datasets=a,,b")).eval_datasets, { "a", "", "b" })
  end)

  it("reads lists of integers and numbers, negatives included", function()
    eq(parse(with_model("--eval-ids", "3", "-4", "5")).eval_ids, { 3, -4, 5 })
    eq(parse(with_model("--eval-ids=7,8")).eval_ids, { 7, 8 })
    eq(parse(with_model("--weights", "0.5", "-1e-3")).weights, { 0.5, -1e-3 })
    usage(with_model("--eval-ids", "1", "x"), "--eval-ids: expected a list of integers, got 'x'")
    usage(with_model("--weights=1,zz"), "--weights: expected a list of numbers, got 'zz'")
  end)

  it("repeated list flags append", function()
    eq(parse(with_model("--eval-datasets", "a", "--eval-datasets", "b")).eval_datasets, { "a", "b" })
    eq(parse(with_model("--eval-ids", "9")).eval_ids, { 9 }, "the first use replaces the default")
  end)

  it("lists are JSON arrays, also when empty, and defaults are copies", function()
    local s = spec()
    local o = parse(M, s)
    ok(rl.json.is_array(o.eval_datasets))
    eq(rl.json.encode(o.eval_datasets), "[]")
    o.eval_ids[1] = 99
    eq(s[5].default, { 1, 2 }, "the declared default is untouched")
  end)

  it("needs at least one value", function()
    usage({ "--model-path", "m", "--eval-datasets" },
      "--eval-datasets: missing value; expected one or more strings (or --eval-datasets= for an empty list)")
    usage({ "--eval-datasets", "--model-path", "m" }, "--eval-datasets: missing value")
  end)

  it("checks each item against the choices", function()
    local s = { { name = "stages", type = "list", of = "string", choices = { "gen", "train" } } }
    eq(parse({ "--stages", "gen", "train" }, s).stages, { "gen", "train" })
    usage({ "--stages", "gen", "trian" }, "--stages: invalid choice 'trian' (choose from gen, train); did you mean 'train'?", s)
  end)
end)

describe("rl.args positionals and --", function()
  it("fills positionals in order", function()
    local o = parse({ "--model-path", "m", "run.pt" })
    eq(o.dump, "run.pt")
    eq(parse({ "x.pt", "--model-path", "m" }).dump, "x.pt", "flags and positionals may interleave")
  end)

  it("-- ends the flags", function()
    eq(parse({ "--model-path", "m", "--", "--weird-name" }).dump, "--weird-name")
    eq(parse({ "--model-path", "m", "--", "-h" }).dump, "-h", "-h after -- is not help")
    eq(parse({ "--eval-datasets", "a", "b", "--", "d.pt", "--model-path=x" }, {
      { name = "eval_datasets", type = "list" },
      { name = "rest", type = "list", positional = true },
    }).rest, { "d.pt", "--model-path=x" })
  end)

  it("- and negative numbers are positionals", function()
    eq(parse({ "--model-path", "m", "-" }).dump, "-")
    local s = { { name = "n", type = "int", positional = true } }
    eq(parse({ "-3" }, s).n, -3)
    usage({ "abc" }, "N: expected an integer, got 'abc'", s)
  end)

  it("a positional list takes the rest", function()
    local s = {
      { name = "cmd", positional = true, required = true },
      { name = "files", type = "list", positional = true },
    }
    local o = parse({ "view", "a", "b" }, s)
    eq(o.cmd, "view"); eq(o.files, { "a", "b" })
    eq(parse({ "view" }, s).files, {})
  end)

  it("rejects unexpected and missing positionals", function()
    usage({ "--model-path", "m", "a.pt", "b.pt" }, "unexpected argument 'b.pt'")
    usage({ "x" }, "unexpected argument 'x'", {})
    usage({}, "missing required argument CMD", { { name = "cmd", positional = true, required = true } })
  end)
end)

describe("rl.args errors", function()
  it("unknown options suggest the closest declared name", function()
    eq(usage(with_model("--rollout-batchsize", "1"), "unknown option"),
      "unknown option '--rollout-batchsize'; did you mean '--rollout-batch-size'?")
    usage(with_model("--rollout-btach-size=1"), "did you mean '--rollout-batch-size'?")
    usage(with_model("--rl", "1"), "unknown option '--rl'; did you mean '--lr'?")
    usage(with_model("--use-kl"), "did you mean '--use-kl-loss'?")
    usage(with_model("--no-use-kl-los"), "did you mean '--no-use-kl-loss'?")
    usage(with_model("--model"), "did you mean '--model-path'?")
    usage(with_model("--hlep"), "did you mean '--help'?")
    usage(with_model("--log-levle", "info"), "did you mean '--log-level'?")
    usage(with_model("-lr", "1"), "unknown option '-lr'; did you mean '--lr'?")
    eq(usage(with_model("--zzzzzz"), "unknown option"), "unknown option '--zzzzzz'")
  end)

  it("a bad value names the flag and the expected type", function()
    eq(usage(with_model("--rollout-batch-size", "abc"), "--rollout"),
      "--rollout-batch-size: expected an integer, got 'abc'")
  end)

  it("a bad choice lists the choices", function()
    eq(usage(with_model("--advantage-estimator", "gpro"), "invalid choice"),
      "--advantage-estimator: invalid choice 'gpro' (choose from grpo, reinforce_plus_plus); did you mean 'grpo'?")
    eq(usage(with_model("--advantage-estimator", "ppo"), "invalid choice"),
      "--advantage-estimator: invalid choice 'ppo' (choose from grpo, reinforce_plus_plus)")
    local s = { { name = "n", type = "int", choices = { 1, 2, 4 } } }
    eq(parse({ "--n", "4" }, s).n, 4)
    usage({ "--n", "3" }, "--n: invalid choice '3' (choose from 1, 2, 4)", s)
  end)

  it("reports missing required options, all of them", function()
    eq(usage({}, "missing"), "missing required option --model-path")
    local s = { { name = "a", required = true }, { name = "b_c", type = "int", required = true } }
    eq(usage({}, "missing", s), "missing required options --a, --b-c")
  end)

  it("reports a missing value", function()
    eq(usage({ "--model-path" }, "missing value"), "--model-path: missing value; expected a string")
    eq(usage(with_model("--rollout-batch-size", "--lr", "1"), "missing value"),
      "--rollout-batch-size: missing value; expected an integer")
  end)

  it("argv entries must be strings", function()
    usage({ "--model-path", 3 }, "argument #2 is a number, not a string")
  end)

  it("rl.args(spec, argv) raises a usage table the host turns into exit status 2", function()
    local saved = rl.script
    rl.script = "recipes/x.lua"
    local okk, err = pcall(rl.args, spec(), { "--rollout-batchsize", "1" })
    rl.script = saved
    eq(okk, false)
    eq(type(err), "table")
    eq(err.usage, true)
    ok(rl.args.is_usage_error(err))
    eq(err.message, "grpo.lua: unknown option '--rollout-batchsize'; did you mean '--rollout-batch-size'?\n"
      .. "Try 'rlhost grpo.lua --help' for the options.")
    eq(tostring(err), err.message)
    local code, msg = require("rl._host").outcome({ status = "failed", error = err })
    eq(code, 2); eq(msg, err.message)
  end)

  it("rl.args.usage_error raises a usage error for a recipe's own checks", function()
    local saved = rl.script
    rl.script = "recipes/x.lua"
    local err = raises(function() rl.args.usage_error("--a must be below --b") end)
    rl.script = saved
    eq(err.usage, true)
    eq(err.message, "recipes/x.lua: --a must be below --b\nTry 'rlhost recipes/x.lua --help' for the options.")
  end)

  it("rl.args(spec, argv) returns the options on success", function()
    local o = rl.args(spec(), { "--model-path", "m", "--rollout-batch-size", "4" })
    eq(o.rollout_batch_size, 4)
  end)

  it("uses rl.argv when no argv is given", function()
    local saved = rl.argv
    rl.argv = { "--model-path", "from-argv" }
    local o = rl.args.parse(spec())
    local o2 = rl.args(spec())
    rl.argv = saved
    eq(o.model_path, "from-argv")
    eq(o2.model_path, "from-argv")
  end)
end)

describe("rl.args --log-level", function()
  it("sets rl.log.level", function()
    local before = rl.log.level()
    local o = parse(with_model("--log-level", "debug"))
    eq(rl.log.level(), "debug")
    eq(o.log_level, nil, "built-in options are not in the result")
    parse(with_model("--log-level=ERROR"))
    eq(rl.log.level(), "error")
    rl.log.level(before)
  end)

  it("rejects unknown levels and a missing level", function()
    local before = rl.log.level()
    usage(with_model("--log-level", "loud"),
      "--log-level: expected one of trace, debug, info, warn, error, critical, off, got 'loud'")
    usage({ "--log-level" }, "--log-level: missing value")
    eq(rl.log.level(), before, "a failed parse changes nothing")
  end)
end)

describe("rl.args help", function()
  it("-h and --help return the help text from parse", function()
    for _, h in ipairs { "-h", "--help" } do
      local v, text, kind = parse({ "--rollout-batch-size", "zz", h })
      eq(v, nil); eq(kind, "help")
      ok(text:find("^usage: rlhost grpo.lua %[options%] %[DUMP%]\n"), text)
    end
  end)

  it("lists every option with flag, type, default, choices, help and required markers", function()
    local text = rl.args.help(spec())
    local function has(s) ok(text:find(s, 1, true), "help lacks '" .. s .. "':\n" .. text) end
    has("GRPO on GSM8K")
    has("--rollout-batch-size INT")
    has("prompts per rollout step [int, default: 32]")
    has("--lr NUM")
    has("learning rate [number, default: 1e-06]")
    has("--[no-]use-kl-loss")
    has("add the KL loss [bool, default: false]")
    has("--eval-datasets STR...")
    has("[list of string, default: []]")
    has("--eval-ids INT...")
    has("[list of int, default: 1,2]")
    has("--advantage-estimator {grpo,reinforce_plus_plus}")
    has("[string, one of: grpo, reinforce_plus_plus, default: grpo]")
    has("--model-path STR")
    has("[string, required]")
    has("arguments:")
    has("DUMP")
    has("dump file to read [string, optional]")
    has("built-in options:")
    has("--log-level LEVEL")
    has("-h, --help")
  end)

  it("aligns help text in a column and wraps long flags", function()
    local text = rl.args.help(spec())
    ok(text:find("\n  %-%-lr NUM                    learning rate"), text)
    ok(text:find("\n  %-%-advantage%-estimator {grpo,reinforce_plus_plus}\n                              %["), text)
  end)

  it("shows prog, metavar, epilog; rl.script is the default prog", function()
    local text = rl.args.help({
      prog = "tool.lua", epilog = "See docs/recipes.md.",
      { name = "out", metavar = "PATH", help = "where to write" },
      { name = "files", type = "list", positional = true, required = true },
    })
    ok(text:find("usage: rlhost tool.lua [options] FILES...", 1, true), text)
    ok(text:find("--out PATH", 1, true), text)
    ok(text:find("See docs/recipes.md.\n$"), text)
    local saved = rl.script
    rl.script = "recipes/y.lua"
    local t2 = rl.args.help({})
    rl.script = saved
    ok(t2:find("^usage: rlhost recipes/y.lua %[options%]"), t2)
    -- a prog spelled with the binary's name is not doubled ("usage: rlhost rlhost ...")
    local t3 = rl.args.help({ prog = "rlhost tools/x.lua" })
    ok(t3:find("^usage: rlhost tools/x.lua %[options%]"), t3)
  end)

  it("rl.args prints the help and exits 0", function()
    local path = os.tmpname()
    local f = io.open(path, "w")
    io.output(f)
    local okk, err = pcall(rl.args, spec(), { "--help" })
    io.output(io.stdout)
    f:close()
    local text = io.open(path):read("*a")
    os.remove(path)
    eq(okk, false)
    eq(getmetatable(err), rl._Exit)
    eq(err.code, 0)
    ok(text:find("--rollout-batch-size INT", 1, true), text)
  end)
end)

describe("rl.args declarations", function()
  -- raises(fn, pattern) plus: the error points at this file (level 2).
  local function bad(s, pattern)
    local err = raises(function() rl.args.parse(s, {}) end, pattern)
    ok(tostring(err):find("args_spec.lua:", 1, true), "error should point at the caller: " .. tostring(err))
    raises(function() rl.args(s, {}) end, pattern)
    raises(function() rl.args.help(s) end, pattern)
  end

  it("rejects a non-table spec and non-table options", function()
    bad(nil, "rl.args: expected a table of option declarations, got nil")
    bad({ "x" }, "rl.args: option #1: expected a table")
  end)

  it("rejects bad and duplicate names", function()
    bad({ { type = "int" } }, "rl.args: option #1: 'name' must be a snake_case name")
    bad({ { name = "2x" } }, "'name' must be a snake_case name like \"rollout_batch_size\", got '2x'")
    bad({ { name = "a" }, { name = "a" } }, "rl.args: option 'a' is declared twice")
    bad({ { name = "a_b" }, { name = "a-b" } }, "option 'a_b' is declared twice")
    bad({ { name = "help" } }, "option 'help': the name is reserved")
    bad({ { name = "log_level" } }, "option 'log_level': the name is reserved")
  end)

  it("rejects unknown types and fields", function()
    bad({ { name = "lr", type = "flaot" } },
      "rl.args: option 'lr': unknown type 'flaot' (expected string, int, number, bool or list)")
    bad({ { name = "xs", type = "list", of = "table" } }, "option 'xs': unknown list item type 'table'")
    bad({ { name = "x", type = "int", of = "int" } }, "option 'x': 'of' only applies to type \"list\"")
    bad({ { name = "lr", defualt = 1 } }, "option 'lr': unknown field 'defualt'")
    bad({ descripton = "x" }, "rl.args: unknown field 'descripton'")
  end)

  it("rejects defaults of the wrong type", function()
    bad({ { name = "n", type = "int", default = "abc" } }, "rl.args: option 'n': default abc is not an integer")
    bad({ { name = "n", type = "int", default = 1.5 } }, "option 'n': default 1.5 is not an integer")
    bad({ { name = "b", type = "bool", default = 0 } }, "option 'b': default 0 is not a boolean")
    bad({ { name = "xs", type = "list", of = "int", default = { 1, "a" } } }, "option 'xs': default[2] a is not an integer")
    bad({ { name = "xs", type = "list", default = "a" } }, "option 'xs': default a is not a list")
    bad({ { name = "c", choices = { "a", "b" }, default = "z" } }, "option 'c': default z is not one of the choices (a, b)")
    bad({ { name = "c", type = "int", choices = { 1, "2" } } }, "option 'c': choices[2] 2 is not an integer")
    bad({ { name = "r", required = true, default = "x" } }, "option 'r': has both required = true and a default")
    bad({ { name = "p", type = "bool", positional = true } }, "a positional argument cannot be a bool")
    bad({ { name = "a", type = "list", positional = true }, { name = "b", positional = true } },
      "a positional list ('a') must be the last positional")
  end)

  it("infers the type from the default, and accepts type aliases", function()
    local o = parse({}, {
      { name = "a", default = 1.5 }, { name = "b", default = true }, { name = "c", default = { "x" } },
      { name = "d" }, { name = "e", type = "integer", default = 2 }, { name = "f", type = "float" },
      { name = "g", type = "boolean" },
    })
    eq(o, { a = 1.5, b = true, c = { "x" }, e = 2, g = false })
    usage({ "--a", "x" }, "--a: expected a number", { { name = "a", default = 1 } })
  end)
end)

describe("rl.args passthrough", function()
  local function pspec()
    local s = spec()
    s.passthrough = { vllm = "vllm_args" }
    s[#s + 1] = { name = "vllm_python", type = "string" }
    return s
  end
  it("collects --<prefix>-<flag> [V] into a table, declared flags first", function()
    local v = assert(parse({ "--model-path", "m", "--vllm-max-model-len", "384", "--vllm-enforce-eager",
                             "--vllm-profiler-config={\"a\":1}", "--vllm_gpu_memory_utilization", "0.7",
                             "--vllm-python", "/py", "--vllm-seed", "-1" }, pspec()))
    eq(v.vllm_args, { max_model_len = "384", enforce_eager = true, profiler_config = '{"a":1}',
                      gpu_memory_utilization = "0.7", seed = "-1" })
    eq(v.vllm_python, "/py")
  end)
  it("is an empty table when none is given, and in the help", function()
    eq(assert(parse({ "--model-path", "m" }, pspec())).vllm_args, {})
    ok(rl.args.help(pspec()):find("--vllm-<flag> [V]", 1, true))
    usage({ "--model-path", "m", "--vllm" }, "unknown option '--vllm'", pspec())
  end)
  it("rejects a bad passthrough declaration", function()
    local s = spec()
    s.passthrough = "vllm"
    raises(function() parse({}, s) end, "'passthrough' must be a table")
  end)
end)
