--- rl.rewards.latex_text: LaTeX answers rendered as plain text, the way slime's
--- sympy grader sees them (it converts with pylatexenc's latex-to-text first).
--
--   latex_text.convert(s) -> text, or nil where the converter gives up (\sqrt with no argument)
--
-- A \frac whose arguments run out at the end stays "%s/%s" and the rest is read on.
--
-- Rules: \frac{a}{b} → "a/b" (no parentheses), \sqrt[n]{x} → "√(x)", groups lose
-- their braces, symbol macros become their Unicode character (\pi → π, \cdot → ·,
-- \times → ×, \infty → ∞, \le → ≤, Greek letters, ...), \mathbb{R} → ℝ, \mbox{..}
-- disappears, "\\" is a newline, "\," "\;" "\:" "\ " a space, "~" a no-break
-- space, "$" and unknown macros (\text, \mathrm, \left, \boxed, ...) vanish and
-- leave their arguments; a letter macro swallows the blanks after it.
local pytext = require "rl.rewards.pytext"

local M = {}

local SYMBOL = {
  pi = "π", infty = "∞", cup = "∪", cap = "∩", cdot = "·", times = "×", div = "÷", pm = "±", mp = "∓",
  le = "≤", leq = "≤", ge = "≥", geq = "≥", neq = "≠", approx = "≈", circ = "∘", dots = "…", ldots = "…",
  cdots = "⋯", vdots = "⋮", ddots = "⋱", ["in"] = "∈", notin = "∉", emptyset = "∅", varnothing = "∅",
  lfloor = "⌊", rfloor = "⌋", lceil = "⌈", rceil = "⌉", mid = "|", vert = "|", lvert = "|", rvert = "|",
  angle = "∠", to = "→", rightarrow = "→", Rightarrow = "⇒", Leftrightarrow = "⇔", leftrightarrow = "↔",
  prime = "'", textdollar = "$", ast = "∗", star = "⋆", sim = "∼", equiv = "≡", perp = "⊥", parallel = "∥",
  propto = "∝", ell = "ℓ", hbar = "ħ", partial = "∂", nabla = "∇", sum = "∑", prod = "∏", int = "∫",
  setminus = "∖", backslash = "\\", textbackslash = "\\", langle = "⟨", rangle = "⟩", dagger = "†",
  subset = "⊂", subseteq = "⊆", supset = "⊃", forall = "∀", exists = "∃", wedge = "∧", vee = "∨",
  oplus = "⊕", otimes = "⊗", uparrow = "↑", downarrow = "↓", mapsto = "↦", quad = "  ", qquad = "    ",
  sin = "sin", cos = "cos", tan = "tan", log = "log", ln = "ln", exp = "exp", lim = "lim", min = "min", max = "max",
  alpha = "α", beta = "β", gamma = "γ", delta = "δ", epsilon = "ϵ", varepsilon = "ε", zeta = "ζ", eta = "η",
  theta = "θ", lambda = "λ", mu = "μ", nu = "ν", xi = "ξ", rho = "ρ", sigma = "σ", tau = "τ", phi = "ϕ",
  varphi = "φ", chi = "χ", psi = "ψ", omega = "ω", Gamma = "Γ", Delta = "Δ", Theta = "Θ", Lambda = "Λ",
  Pi = "Π", Sigma = "Σ", Phi = "Φ", Omega = "Ω", kappa = "κ", iota = "ι", upsilon = "υ", omicron = "ο",
}
local PUNCT = { [","] = " ", [";"] = " ", [":"] = " ", [" "] = " ", ["\\"] = "\n", ["{"] = "{", ["}"] = "}",
  ["%"] = "%", ["$"] = "$", ["&"] = "&", ["#"] = "#", ["_"] = "_", ["-"] = "\194\173" }
local DROP_ARG = { mbox = true, texttt = true }
local BB = { R = "ℝ", Z = "ℤ", N = "ℕ", Q = "ℚ", C = "ℂ" }

local render, read_arg

local function is_letter(ch) return ch and ch:find("^%a$") ~= nil end
local function is_blank(ch) return ch == " " or ch == "\t" or ch == "\n" or ch == "\r" end

-- The macro starting at cs[i] == "\\": its text and the index after it.
local function macro(cs, i, n)
  local j = i + 1
  if j > n then return "", j end
  if cs[j] == "\\" then   -- a line break: "\\*" and "\\[..]" swallow their star and spacing
    local k = j + 1
    if cs[k] == "*" then k = k + 1 end
    if cs[k] == "[" then
      while k <= n and cs[k] ~= "]" do k = k + 1 end
      k = k + 1
    end
    return "\n", k
  end
  if not is_letter(cs[j]) then
    return PUNCT[cs[j]] or "", j + 1
  end
  local k = j
  while k <= n and is_letter(cs[k]) do k = k + 1 end
  local name = table.concat(cs, "", j, k - 1)
  while k <= n and is_blank(cs[k]) do k = k + 1 end
  if name == "frac" then
    -- Arguments running out at the end: the template is left as it is and the text goes on after \frac.
    local a, b, k2 = nil, nil, k
    a, k2 = read_arg(cs, k2, n)
    if a then b, k2 = read_arg(cs, k2, n) end
    if not (a and b) then return "%s/%s", k end
    return a .. "/" .. b, k2
  elseif name == "sqrt" then
    local p = k
    while p <= n and is_blank(cs[p]) do p = p + 1 end
    if cs[p] == "[" then
      while p <= n and cs[p] ~= "]" do p = p + 1 end
      if p > n then error("unclosed [", 0) end
      k = p + 1
    end
    local a
    a, k = read_arg(cs, k, n)
    if not a then error("\\sqrt needs an argument", 0) end
    return "√(" .. a .. ")", k
  elseif DROP_ARG[name] then
    local _
    _, k = read_arg(cs, k, n)
    return "", k
  elseif name == "mathbb" then
    local a
    a, k = read_arg(cs, k, n)
    return a and (BB[a] or a) or "", k
  end
  return SYMBOL[name] or "", k
end

-- One argument: a group's text, a macro's text or one character; "" at a closing brace; nil at the end.
function read_arg(cs, i, n)
  while i <= n and is_blank(cs[i]) do i = i + 1 end
  if i > n then return nil, i end
  local ch = cs[i]
  if ch == "}" then return "", i end
  if ch == "{" then
    local depth, j = 1, i + 1
    while j <= n do
      if cs[j] == "{" then depth = depth + 1 elseif cs[j] == "}" then
        depth = depth - 1
        if depth == 0 then break end
      end
      j = j + 1
    end
    return render(cs, i + 1, math.min(j - 1, n)), j + 1
  elseif ch == "\\" then
    return macro(cs, i, n)
  end
  return render(cs, i, i), i + 1
end

function render(cs, i, n)
  local out = {}
  while i <= n do
    local ch = cs[i]
    if ch == "\\" then
      local text
      text, i = macro(cs, i, n)
      out[#out + 1] = text
    elseif ch == "{" or ch == "}" or ch == "$" then
      i = i + 1
    elseif ch == "~" then
      out[#out + 1] = "\194\160"
      i = i + 1
    elseif ch == "%" then
      while i <= n and cs[i] ~= "\n" do i = i + 1 end
    else
      out[#out + 1] = ch
      i = i + 1
    end
  end
  return table.concat(out)
end

function M.convert(s)
  local cs = pytext.chars(s)
  local ok, text = pcall(render, cs, 1, #cs)
  if not ok then return nil end
  return text
end

return M
