--- rl.mathgen: procedurally generated grade-school word problems in GSM8K's format
--- (a question, a worked answer, a final "#### N" line), deterministic for a seed.
--- They train and evaluate the embedded default model (docs/recipes.md).
--
--   local p = rl.mathgen.problem(rl.pyrandom.new(1))        -- {question=..., answer="...\n#### 24", value=24, steps=2}
--   local train, test = rl.mathgen.splits { seed = 1, train = 4000, test = 200 }
--   rl.mathgen.write_jsonl("train.jsonl", train)             -- {"question": ..., "answer": ...} lines
--   local dir = rl.mathgen.default_model()                   -- the cached warm model (rl.mathgen.warmup)
--   local tdir = rl.mathgen.default_model { tools = true }    -- its tool-using variant (rl.mathgen.tools)
--
-- Difficulty knobs (opts of problem/dataset/splits): max_number (amounts, default 10),
-- max_factor (counts, prices and multipliers, default 5), steps (weights of 1-, 2- and
-- 3-step templates, default {1, 1, 1}). Every number in a question and an answer is a
-- non-negative integer; the worked lines write the arithmetic as "4*6=24".
local M = {}

M.DEFAULTS = { max_number = 10, max_factor = 5, steps = { 1, 1, 1 } }

local NAMES = {
  { "Tom", "he", "his" }, { "Mia", "she", "her" }, { "Sam", "he", "his" }, { "Lily", "she", "her" },
  { "Ben", "he", "his" }, { "Emma", "she", "her" }, { "Jack", "he", "his" }, { "Anna", "she", "her" },
  { "Leo", "he", "his" }, { "Zoe", "she", "her" }, { "Max", "he", "his" }, { "Ella", "she", "her" },
}
local ITEMS = { "apples", "pens", "cookies", "stickers", "marbles", "books", "cards", "eggs", "shells",
                "flowers", "toys", "candies", "balls", "stamps", "rocks", "oranges" }
local CONTAINERS = { { "box", "boxes" }, { "bag", "bags" }, { "pack", "packs" }, { "basket", "baskets" },
                     { "jar", "jars" } }
local GAINS = { "finds", "buys", "gets", "picks" }
local DAYS = { "Monday", "Tuesday", "Wednesday", "Thursday", "Friday" }

local function pick(r, list) return list[r:randbelow(#list) + 1] end
local function int(r, lo, hi) return lo + r:randbelow(hi - lo + 1) end
local function cap(s) return s:sub(1, 1):upper() .. s:sub(2) end

-- Two different people and two different item kinds.
local function cast(r)
  local a = pick(r, NAMES)
  local b
  repeat b = pick(r, NAMES) until b ~= a
  local it = pick(r, ITEMS)
  local it2
  repeat it2 = pick(r, ITEMS) until it2 ~= it
  return { n = a[1], he = a[2], He = cap(a[2]), his = a[3], m = b[1], it = it, it2 = it2, box = pick(r, CONTAINERS) }
end

-- "{x}" fields from the table t.
local function fill(s, t) return (s:gsub("{(%w+)}", function(k) return tostring(assert(t[k], k)) end)) end

-- Templates: fn(r, c, o) -> question, {worked lines}, value; c is the cast, o the knobs.
local T = { {}, {}, {} }

T[1][1] = function(r, c, o)  -- add
  c.a, c.b, c.verb = int(r, 2, o.max_number), int(r, 2, o.max_number), pick(r, GAINS)
  c.x = c.a + c.b
  return fill("{n} has {a} {it}. {He} {verb} {b} more. How many {it} does {n} have now?", c),
    { fill("{n} has {a}+{b}={x} {it} now.", c) }, c.x
end
T[1][2] = function(r, c, o)  -- subtract
  c.b, c.x = int(r, 1, o.max_number), int(r, 1, o.max_number)
  c.a = c.b + c.x
  return fill("{n} has {a} {it}. {He} gives {b} of them to {m}. How many {it} does {n} have left?", c),
    { fill("{n} has {a}-{b}={x} {it} left.", c) }, c.x
end
T[1][3] = function(r, c, o)  -- multiply
  c.a, c.b, c.c1, c.cs = int(r, 2, o.max_factor), int(r, 2, o.max_number), c.box[1], c.box[2]
  c.x = c.a * c.b
  return fill("{n} has {a} {cs} of {it}. Each {c1} holds {b} {it}. How many {it} does {n} have?", c),
    { fill("{n} has {a}*{b}={x} {it}.", c) }, c.x
end
T[1][4] = function(r, c, o)  -- share
  c.b, c.x = int(r, 2, o.max_factor), int(r, 1, o.max_factor)
  c.a = c.b * c.x
  return fill("{n} shares {a} {it} equally among {b} friends. How many {it} does each friend get?", c),
    { fill("Each friend gets {a}/{b}={x} {it}.", c) }, c.x
end

T[2][1] = function(r, c, o)  -- spend
  c.a, c.p, c.q = int(r, 2, o.max_factor), int(r, 1, o.max_factor), int(r, 1, o.max_number)
  c.x = c.a * c.p
  c.y = c.x + c.q
  c.c1 = c.box[1]
  return fill("{n} buys {a} {it} for ${p} each and a {c1} for ${q}. How much does {he} spend?", c),
    { fill("The {it} cost {a}*{p}=${x}.", c), fill("{He} spends {x}+{q}=${y}.", c) }, c.y
end
T[2][2] = function(r, c, o)  -- change
  c.a, c.p = int(r, 2, o.max_factor), int(r, 1, o.max_factor)
  c.x = c.a * c.p
  c.y = int(r, 1, o.max_number)
  c.w = c.x + c.y
  return fill("{n} has ${w}. {He} buys {a} {it} for ${p} each. How much money does {he} have left?", c),
    { fill("The {it} cost {a}*{p}=${x}.", c), fill("{He} has {w}-{x}=${y} left.", c) }, c.y
end
T[2][3] = function(r, c, o)  -- times as many
  c.a, c.k = int(r, 2, o.max_number), int(r, 2, o.max_factor)
  c.x = c.a * c.k
  c.y = c.a + c.x
  return fill("{n} has {a} {it}. {m} has {k} times as many. How many {it} do they have together?", c),
    { fill("{m} has {a}*{k}={x} {it}.", c), fill("Together they have {a}+{x}={y} {it}.", c) }, c.y
end
T[2][4] = function(r, c, o)  -- two days, then some eaten / lost
  c.d1 = int(r, 1, #DAYS - 1)
  c.day1, c.day2 = DAYS[c.d1], DAYS[c.d1 + 1]
  c.a, c.b = int(r, 2, o.max_number), int(r, 2, o.max_number)
  c.x = c.a + c.b
  c.c = int(r, 1, c.x - 1)
  c.y = c.x - c.c
  return fill("{n} gets {a} {it} on {day1} and {b} on {day2}. {He} loses {c} of them. How many {it} are left?", c),
    { fill("{n} gets {a}+{b}={x} {it}.", c), fill("{x}-{c}={y} {it} are left.", c) }, c.y
end

T[3][1] = function(r, c, o)  -- buy boxes, add, give away
  c.a, c.b, c.k = int(r, 2, o.max_number), int(r, 2, o.max_factor), int(r, 2, o.max_factor)
  c.cs = c.box[2]
  c.x = c.b * c.k
  c.y = c.a + c.x
  c.d = int(r, 1, c.y - 1)
  c.z = c.y - c.d
  return fill("{n} has {a} {it}. {He} buys {b} {cs} with {k} {it} in each, then gives {d} to {m}. "
      .. "How many {it} does {n} have now?", c),
    { fill("{He} buys {b}*{k}={x} {it}.", c), fill("{He} then has {a}+{x}={y} {it}.", c),
      fill("After giving {d} away, {he} has {y}-{d}={z} {it}.", c) }, c.z
end
T[3][2] = function(r, c, o)  -- two purchases
  c.a, c.p, c.b, c.q = int(r, 2, o.max_factor), int(r, 1, o.max_factor), int(r, 2, o.max_factor),
    int(r, 1, o.max_factor)
  c.x, c.y = c.a * c.p, c.b * c.q
  c.z = c.x + c.y
  return fill("{n} buys {a} {it} for ${p} each and {b} {it2} for ${q} each. How much does {he} spend?", c),
    { fill("The {it} cost {a}*{p}=${x}.", c), fill("The {it2} cost {b}*{q}=${y}.", c),
      fill("{He} spends {x}+{y}=${z}.", c) }, c.z
end
T[3][3] = function(r, c, o)  -- buy, share, keep the rest
  c.k, c.f = int(r, 2, o.max_factor), int(r, 2, 5)
  c.b = int(r, 1, o.max_factor)
  c.x = c.k * c.b
  c.e = math.floor(c.x / (c.f + 1))
  if c.e < 1 then c.b, c.x, c.e = c.f + 1, c.k * (c.f + 1), c.k end
  c.g = c.f * c.e
  c.z = c.x - c.g
  c.cs = c.box[2]
  return fill("{n} buys {k} {cs} of {it} with {b} in each. {He} gives {e} {it} to each of {f} friends. "
      .. "How many {it} does {he} keep?", c),
    { fill("{He} buys {k}*{b}={x} {it}.", c), fill("{He} gives away {f}*{e}={g} {it}.", c),
      fill("{He} keeps {x}-{g}={z} {it}.", c) }, c.z
end

local function options(opts)
  local o = {}
  for k, v in pairs(M.DEFAULTS) do o[k] = v end
  for k, v in pairs(opts or {}) do
    if M.DEFAULTS[k] == nil and k ~= "seed" and k ~= "n" and k ~= "train" and k ~= "test" then
      error("rl.mathgen: unknown option '" .. tostring(k) .. "' (max_number, max_factor, steps, seed, n, train, test)", 3)
    end
    o[k] = v
  end
  if o.max_number < 2 or o.max_factor < 2 then error("rl.mathgen: max_number and max_factor must be >= 2", 3) end
  return o
end

--- One problem from the generator r (an rl.pyrandom): {question, answer, value, steps}.
function M.problem(r, opts)
  local o = opts and opts._checked and opts or options(opts)
  local w, total = o.steps, 0
  for i = 1, 3 do total = total + (w[i] or 0) end
  local u, steps = r:random() * total, 3
  for i = 1, 3 do
    if u < (w[i] or 0) then steps = i; break end
    u = u - (w[i] or 0)
  end
  local c = cast(r)
  local q, lines, value = pick(r, T[steps])(r, c, o)
  return { question = q, answer = table.concat(lines, "\n") .. "\n#### " .. value, value = value, steps = steps }
end

--- n problems from seed: a list of {question, answer, value, steps}.
function M.dataset(opts)
  local o = options(opts)
  o._checked = true
  local r, out = require("rl.pyrandom").new(o.seed or 0), {}
  for i = 1, o.n or 1000 do out[i] = M.problem(r, o) end
  return out
end

--- A train split (seed) and a held-out test split (seed + 1, questions seen in train
--- removed, no duplicates): train, test.
function M.splits(opts)
  local o = options(opts)
  local seed = o.seed or 0
  o.n, o.seed = o.train or 4000, seed
  local train = M.dataset(o)
  local seen, test = {}, {}
  for _, p in ipairs(train) do seen[p.question] = true end
  local r = require("rl.pyrandom").new(seed + 1)
  o._checked = true
  local want, tries = o.test or 200, 0
  while #test < want do
    tries = tries + 1
    if tries > 100 * want then error("rl.mathgen.splits: cannot find enough unseen test problems; raise max_number", 2) end
    local p = M.problem(r, o)
    if not seen[p.question] then
      seen[p.question] = true
      test[#test + 1] = p
    end
  end
  return train, test
end

--- Writes problems as GSM8K JSONL ({"question": ..., "answer": ...} per line). true, or nil, err.
function M.write_jsonl(path, problems)
  local json = require "rl.json"
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  for _, p in ipairs(problems) do
    f:write('{"question": ', json.encode(p.question), ', "answer": ', json.encode(p.answer), "}\n")
  end
  f:close()
  return true
end

--- The cached default model directory, built on first use (rl.mathgen.warmup.default_model).
function M.default_model(opts) return require("rl.mathgen.warmup").default_model(opts) end

return require("rl._lazy")(M, { tokenizer = "rl.mathgen.tokenizer", warmup = "rl.mathgen.warmup",
  tools = "rl.mathgen.tools" })
