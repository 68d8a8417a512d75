-- slime's math graders in rl.rewards: `math` (grade_answer_verl), `deepscaler` and `dapo`, on cases
-- derived from slime's rules (THUDM/slime slime/rollout/rm_hub/math_utils.py, deepscaler.py,
-- math_dapo_utils.py), one block per kind of hard answer. Each row: the boxed answer, the label, and the
-- verdict those rules give; the comment above a block says which rule decides it.
local rl = require "rl"
local rewards = rl.rewards
local mathr = require "rl.rewards.math"
local deepscaler = require "rl.rewards.deepscaler"
local dapo = require "rl.rewards.dapo"
local pytext = require "rl.rewards.pytext"
local latex_text = require "rl.rewards.latex_text"

local function response(given)
  if given:find("\\boxed", 1, true) or given:find("\\fbox", 1, true) then return given end
  return "so the answer is \\boxed{" .. given .. "}."
end

local CASES = {
  -- the sympy grader deletes degree, cm, centimeter, meter, mile, second, minute, hour, day, week,
  -- month, year, foot, feet, inch, yard (+es/s, blanks, ^N) anywhere, so "Monday" is "mon"; other words stay;
  -- million/billion become *10^6/^9, which is not an integer literal, so never equals one
  { "unit words (sympy path drops them)", {
    { "5 cm", "5", 1 }, { "5 meters", "5", 1 }, { "12 miles", "12", 1 }, { "3 hours", "3", 1 },
    { "2 weeks", "2", 1 }, { "90 degrees", "90", 1 }, { "7 feet", "7", 1 }, { "4 inches", "4", 1 },
    { "5 cm^2", "5", 1 }, { "3.5 meters", "3.5", 1 }, { "5 apples", "5", 0 }, { "20 km", "20", 0 },
    { "20 m", "20", 0 }, { "60 mph", "60", 0 }, { "5 dollars", "5", 0 }, { "5\\text{ cm}", "5", 1 },
    { "5 \\text{cm}", "5", 1 }, { "Monday", "mon", 1 }, { "3 million", "3000000", 0 },
    { "2.5 billion", "2500000000", 0 }, { "100 cm", "1 meter", 0 }, { "12 inches", "1 foot", 0 },
  } },
  -- a number Python's float() reads within 1e-7 of an integer is that integer; other floats go to
  -- sympy, whose 53-bit Floats do not equal a rational unless exactly (0.5 = 1/2, 0.333333333 is not 1/3)
  { "floats within slime's tolerance", {
    { "5.00000001", "5", 1 }, { "5.0000001", "5", 0 }, { "5.000001", "5", 0 }, { "4.99999999", "5", 1 },
    { "2.0", "2", 1 }, { "2.00", "2", 1 }, { "1e3", "1000", 1 }, { "1.5e2", "150", 1 }, { "0.5", "1/2", 1 },
    { "0.50", "\\frac{1}{2}", 1 }, { "0.25", "\\frac{1}{4}", 1 }, { "0.333333333", "1/3", 0 },
    { "0.3333333333333333", "\\frac{1}{3}", 0 }, { "3.14", "\\pi", 0 }, { "0.1+0.2", "0.3", 0 },
    { "1.25", "\\frac{5}{4}", 1 }, { "12.50", "12.5", 1 }, { "1e-9", "0", 1 }, { "1e-7", "0", 1 },
    { "1e-6", "0", 0 },
  } },
  -- Python's float() reads any Unicode decimal digits, so an integer written with them becomes ASCII;
  -- a non-integer or a minus sign that is not ASCII does not ("３．５"), and only a plain comma separates thousands
  { "full-width and Arabic-Indic digits", {
    { "１２", "12", 1 }, { "١٢", "12", 1 }, { "۱۲", "12", 1 }, { "१२", "12", 1 }, { "１２", "13", 0 }, { "－３", "-3", 0 },
    { "３．５", "3.5", 0 }, { "\\text{１２}", "12", 1 }, { "١٬٢٣٤", "1234", 0 }, { "１,２３４", "1234", 1 },
    { "１２ cm", "12", 1 }, { "12", "１２", 1 },
  } },
  -- a whole-string \text{...} is unwrapped by both normalisations; sympy's lower-cases, and "(a)" is a
  -- one-element tuple equal to a
  { "answers wrapped in \\text{}", {
    { "\\text{5}", "5", 1 }, { "\\text{ 5}", "5", 1 }, { "\\text{(A)}", "A", 1 }, { "\\text{(A)}", "(A)", 1 },
    { "\\text{yes}", "Yes", 1 }, { "\\text{5} ", "5", 1 }, { "\\text{5}\\text{ cm}", "5", 1 },
    { "\\textbf{5}", "5", 1 }, { "\\mathrm{5}", "5", 1 }, { "\\text{No solution}", "no solution", 1 },
    { "\\text{even}", "odd", 0 }, { "5", "\\text{5}", 1 },
  } },
  -- "1_000" is a Python float literal; "d,ddd" commas go; a no-break space or apostrophe stays; "1\,000" becomes
  -- "1 000" and then the mixed number 1+000, which is not an integer literal
  { "thousands separators", {
    { "1_000", "1000", 1 }, { "1_000_000", "1000000", 1 }, { "12_34", "1234", 1 }, { "1__000", "1000", 0 },
    { "_1000", "1000", 0 }, { "1\194\160000", "1000", 0 }, { "1\226\128\175000", "1000", 0 }, { "1,000", "1000", 1 },
    { "1,000,000", "1000000", 1 }, { "12,34", "1234", 0 }, { "1\\,000", "1000", 0 }, { "1{,}000", "1000", 1 },
    { "1,\\!000", "1000", 1 }, { "1 000", "1000", 1 }, { "1'000", "1000", 0 },
  } },
  -- only the last "\boxed" counts and it must be followed directly by "{": \fbox alone, "\boxed {" and
  -- unbalanced braces give no answer
  { "\\fbox and box shapes", {
    { "\\fbox{5}", "5", 0 }, { "\\fbox{5} and \\boxed{5}", "5", 1 }, { "\\boxed{5} then \\fbox{9}", "5", 1 },
    { "\\boxed {5}", "5", 0 }, { "\\boxed{ 5 }", "5", 1 }, { "\\boxed{\\boxed{5}}", "5", 1 },
    { "\\boxed{5", "5", 0 }, { "\\boxed 5", "5", 0 },
  } },
  -- two integer fractions a/b must be written identically (2/4 is not 1/2) unless Hendrycks'
  -- strings match; an integer never equals a non-integer text (\frac{4}{1} → "4/1" is not 4); a fraction against a
  -- decimal goes to sympy (3/6 = 0.5)
  { "unreduced fractions and \\frac{a}{1}", {
    { "2/4", "1/2", 0 }, { "\\frac{2}{4}", "\\frac{1}{2}", 0 }, { "\\frac{2}{4}", "1/2", 0 }, { "4/8", "1/2", 0 },
    { "\\frac{4}{1}", "4", 0 }, { "4/1", "4", 0 }, { "\\frac{6}{3}", "2", 0 }, { "\\frac{3}{6}", "0.5", 1 },
    { "3/4", "6/8", 0 }, { "\\dfrac{3}{4}", "3/4", 1 }, { "\\tfrac34", "\\frac{3}{4}", 1 },
    { "-1/2", "\\frac{-1}{2}", 1 }, { "\\frac{1}{2}", "\\frac{2}{4}", 0 }, { "10/4", "5/2", 0 }, { "5/2", "2.5", 1 },
    { "01/2", "1/2", 0 }, { "3 1/2", "7/2", 1 }, { "3\\frac{1}{2}", "\\frac{7}{2}", 1 }, { "\\frac{a}{1}", "a", 1 },
    { "\\frac{1}{3}+\\frac{1}{6}", "\\frac{1}{2}", 1 },
  } },
  -- 0x1a is not a float, so never equals the integer 26; equal texts (after lower-casing) match; "1e5" is a float
  { "hex-looking answers", {
    { "0x1A", "26", 0 }, { "0x1a", "0x1A", 1 }, { "0xFF", "255", 0 }, { "0b101", "5", 0 }, { "FF", "ff", 1 },
    { "ff", "255", 0 }, { "1A", "26", 0 }, { "DEADBEEF", "deadbeef", 1 }, { "0x1A", "0x1B", 0 },
    { "1e5", "100000", 1 }, { "2e", "2e", 1 }, { "e", "2e", 0 },
  } },
  -- Hendrycks' strings or sympy: tuples by element with the same brackets, at most two letters, no ^{ / ^( and no
  -- exponent of two digits or more; a non-integer text never equals an integer (5! and \sqrt{16} are not integer texts)
  { "ordinary", {
    { "5", "5", 1 }, { "5", "6", 0 }, { "x = 5", "5", 1 }, { "k = -2", "-2", 1 },
    { "\\left(1,2\\right)", "(1,2)", 1 }, { "(2,1)", "(1,2)", 0 }, { "(1,2]", "(1,2)", 0 }, { "[1, 2]", "[1,2]", 1 },
    { "1 and 2", "1,2", 1 }, { "\\sqrt{8}", "2\\sqrt{2}", 1 }, { "\\sqrt{12}", "2\\sqrt{3}", 1 },
    { "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", 1 }, { "2\\pi", "2 \\pi", 1 },
    { "6\\pi", "6 \\times \\pi", 1 }, { "4\\pi", "\\pi \\cdot 4", 1 }, { "\\frac{\\pi}{4}", "0.785", 0 },
    { "2x+1", "1+2x", 1 }, { "x^2+2x+1", "(x+1)^2", 1 }, { "x^2-1", "(x-1)(x+1)", 1 }, { "2(x+1)", "2x+2", 1 },
    { "abc", "cba", 0 }, { "2^{10}", "1024", 0 }, { "2^10", "1024", 0 }, { "10^6", "1000000", 0 },
    { "\\$5", "5", 1 }, { "50\\%", "50", 1 }, { "50%", "0.5", 0 }, { "90^\\circ", "90", 1 }, { "-5", "5", 0 },
    { "07", "7", 1 }, { "7.", "7", 1 }, { "5!", "120", 0 }, { "\\sqrt{16}", "4", 0 }, { "\\sqrt[3]{8}", "2", 0 },
    { "22/7", "\\pi", 0 }, { "\\sqrt{2}", "1.414", 0 }, { "\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{2}{3}}", 1 },
    -- sympy's reading: a float exponent stays apart from the integer one, digit runs in names are one
    -- number, Unicode letters are symbols
    { "e^2.", "e^2", 0 }, { "x^2.0", "x^2", 0 }, { "a10", "10a", 1 }, { "\\left(\\mathbb{R}\\right)", "\\mathbb{R}", 1 },
  } },
}

describe("rl.rewards.math: slime's grade_answer_verl", function()
  for _, block in ipairs(CASES) do
    it(block[1], function()
      for _, row in ipairs(block[2]) do
        local got = mathr.score(response(row[1]), row[2])
        eq(got, row[3], ("math(%q, %q)"):format(row[1], row[2]))
        -- deepscaler grades the same answer after a </think>
        eq(deepscaler.score("<think>\\boxed{0}</think>" .. response(row[1]), row[2]), row[3], ("deepscaler(%q, %q)"):format(row[1], row[2]))
      end
    end)
  end
  it("labels: boxed, falsy, numbers; pred and target", function()
    eq(mathr.score("\\boxed{4}", "The answer is \\boxed{4}"), 1)
    eq(mathr.score("\\boxed{4}", "\\fbox{4}"), 1)      -- not a boxed label, but the sympy path renders \\fbox away
    eq(mathr.score("\\boxed{0}", 0), 0)                -- a falsy ground truth
    eq(mathr.score("\\boxed{0}", "0"), 1)
    eq(mathr.score("\\boxed{7}", 7), 1)
    eq(mathr.score("\\boxed{5}", ""), 0)
    eq(mathr.score("no box 5", "5"), 0)
    local r, info = mathr.score("\\boxed{\\dfrac{3}{4}}", "\\boxed{0.75}")
    eq(r, 1)
    eq(info, { pred = "\\dfrac{3}{4}", target = "0.75" })
  end)
  it("a rule that cannot apply leaves the answer as it is", function()
    -- two "\\text{ " units: Hendrycks' normalisation gives up and compares the trimmed text
    ok(mathr.grade_mathd("5 \\text{ m} \\text{ s}", "5 \\text{ m} \\text{ s}"))
    ok(not mathr.grade_mathd("5 \\text{ m} \\text{ s}", "5"))
    eq(mathr.normalize("\\sqrt"), "\\sqrt")
    eq(mathr.normalize("\\frac12 \\text{ cm}"), "\\frac{1}{2}")
  end)
end)

describe("rl.rewards.deepscaler", function()
  it("grades only after </think> or ###Response", function()
    eq(deepscaler.score("\\boxed{5}", "5"), 0)
    eq(deepscaler.score("think \\boxed{5}</think>no box", "5"), 0)
    eq(deepscaler.score("a</think>b</think>\\boxed{5}", "5"), 1)
    eq(deepscaler.score("###Response \\boxed{5} ###Response \\boxed{6}", "5"), 1)
    eq(deepscaler.solution("x ###Response y"), " y")
  end)
  it("labels: boxed or fboxed, empty; 0 is graded", function()
    eq(deepscaler.score("</think>\\boxed{5}", "\\boxed{5}"), 1)
    eq(deepscaler.score("</think>\\boxed{5}", "\\fbox{5}"), 0)
    eq(deepscaler.score("</think>\\boxed{5}", ""), 0)
    eq(deepscaler.score("</think>\\boxed{0}", 0), 1)
  end)
end)

describe("rl.rewards.dapo", function()
  it("the last Answer: line, Minerva-normalised, against the integer label", function()
    eq(dapo.score("work\nAnswer: 42", "42"), { score = 1.0, acc = true, pred = "42" })
    eq(dapo.score("Answer: 1\nanswer :  $1,000$ dollars", "1000").score, 1.0)
    eq(dapo.score("The answer:\n72", "72.0").score, 1.0)
    eq(dapo.score("Answer: \\boxed{18} units", "\\boxed{18}").score, 1.0)
    eq(dapo.score("Answer: 42 and more", "42").pred, "42andmore")
    eq(dapo.score(("Answer: 7\n") .. ("x"):rep(300), "7"), { score = -1.0, acc = false, pred = "[INVALID]" })
    eq(dapo.normalize("x = \\frac12"), "\\frac{1}{2}")
    -- commas go when only digits remain, digits as Python's str.isdigit has them (so "²" is one)
    eq(dapo.score("Answer: ²,9", "29"), { score = -1.0, acc = false, pred = "²9" })
    eq(dapo.score("Answer: 1,2", "12").score, 1.0)
    eq(dapo.score("Answer: x,9", "9").pred, "x,9")
    raises(function() dapo.score("Answer: 5", "five") end, "not a number")
  end)
end)

describe("rl.rewards: slime's rm_type names", function()
  it("get, the boxed_ prefix, metadata.rm_type", function()
    eq(rewards.get("math") { response = "\\boxed{1,000}", label = "1000" }, 1)
    eq(rewards.get("deepscaler") { response = "</think>\\boxed{5 cm}", label = "5" }, 1)
    eq(rewards.get("dapo") { response = "Answer: 3", label = "3" }.score, 1.0)
    -- boxed_: slime's extraction, so \\fbox leaves "" to grade
    eq(rewards.get("boxed_dapo") { response = "\\boxed{Answer: 3}", label = "3" }.score, 1.0)
    eq(rewards.get("boxed_math") { response = "\\fbox{3}", label = "3" }, 0)
    local fn = rewards.by_rm_type("gsm8k")
    eq(fn { response = "\\boxed{2/4}", label = "0.5" }, 1)
    eq(fn { response = "\\boxed{2/4}", label = "1/2", metadata = { rm_type = " math " } }, 0)
    eq(fn { response = "</think>\\boxed{5}", label = "5", metadata = { rm_type = "deepscaler" } }, 1)
    raises(function() fn { response = "", label = "1", metadata = { rm_type = "nope" } } end, "unknown reward 'nope'")
    raises(function() rewards.by_rm_type("nope") end, "unknown reward")
  end)
end)

describe("rl.rewards.pytext and latex_text", function()
  it("Python's float(): Unicode digits and blanks, underscores between digits", function()
    eq(pytext.float("１２"), 12)
    eq(pytext.float(" ٣.٥\194\160"), 3.5)
    eq(pytext.float("1_000.5"), 1000.5)
    eq(pytext.float("1e1_0"), 1e10)
    eq(pytext.float("-Infinity"), -math.huge)
    for _, bad in ipairs { "1__0", "_1", "1_", "0x1A", ".", "1 000", "1,000", "", "e5", "1e" } do
      eq(pytext.float(bad), nil, bad)
    end
    eq(pytext.strip_commas("1,234,567 and 12,34"), "1234567 and 12,34")
    eq(pytext.lower("ΠAbc"), "πabc")
  end)
  it("LaTeX as text", function()
    eq(latex_text.convert(" \\frac{a+b}{c}"), " a+b/c")
    eq(latex_text.convert("\\sqrt[3]{8} \\pi r"), "√(8) πr")
    eq(latex_text.convert("\\mathbb{R}\\mbox{x}\\text{cm}~1\\,000"), "ℝcm\194\160" .. "1 000")
    eq(latex_text.convert("\\sqrt"), nil)
  end)
end)
