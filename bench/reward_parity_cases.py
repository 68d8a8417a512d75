"""Hard cases for rlhost's ports of slime's math graders (bench/reward_parity.sh):
(response, label) pairs of four kinds, deterministic for a seed."""
import random

def hand_built():
    random.seed(25)
    cases = []
    def add(given, truth, wrap=None):
        cases.append({"given": given, "label": truth, "wrap": wrap})
    FW = str.maketrans("0123456789.,-", "０１２３４５６７８９．，－")
    AR = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    EAR = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")
    DEV = str.maketrans("0123456789", "०१२३४५६७८९")
    nums = ["0", "7", "12", "42", "105", "1000", "2024", "-3", "-15", "3.5", "0.25", "12.75", "1234567", "100000"]
    units = ["cm", "meters", "meter", "miles", "seconds", "minutes", "hours", "days", "weeks", "months", "years", "feet",
             "foot", "inches", "yards", "degrees", "degree", "cm^2", "cm^3", "square units", "dollars", "apples", "km", "mph",
             "units", "\\text{ cm}", "\\text{cm}", "\\mbox{ cm}", "\\text{ meters}", "\\, \\text{cm}", "^\\circ", "^{\\circ}",
             "\\%", "%", "\\text{ inches}^2", "\\mathrm{cm}", " million", " billion", "inch", "yard", "day", "hour", "mi"]
    for n in ["5", "12", "3.5", "100", "-2", "1/2", "\\frac{1}{2}", "2\\sqrt{3}"]:
        for u in units:
            add(n + " " + u, n)
            add(n + u, n)
        add(n, n + " cm")
        add(n + " cm", n + " cm")
    for n in ["3", "0.5", "1.5", "10", "2.5", "100", "0.1", "-4"]:
        for v in [n + "0", n + ".000", n + "00000001", n + "0000001", n + "000001", n + "0001"]:
            add(v, n)
    for a, b in [("0.333333333", "1/3"), ("0.3333333333333333", "\\frac{1}{3}"), ("0.33", "\\frac13"), ("3.14", "\\pi"),
                 ("3.14159265358979", "\\pi"), ("1.4142135623731", "\\sqrt{2}"), ("0.5", "1/2"), ("0.50", "\\frac{1}{2}"),
                 ("0.25", "\\frac{1}{4}"), ("2.0", "2"), ("2.00000000001", "2"), ("1.999999999", "2"), ("1.99999", "2"),
                 ("1e3", "1000"), ("1E3", "1000"), ("1.5e2", "150"), ("2e-3", "0.002"), ("1e-9", "0"), ("1e-7", "0"),
                 ("inf", "\\infty"), ("nan", "0"), ("0.1+0.2", "0.3"), ("0.125", "\\frac{1}{8}"), ("0.2", "1/5"),
                 ("6.0", "6"), ("-0.0", "0"), ("+5", "5"), ("5.", "5"), (".5", "\\frac{1}{2}"), ("0.75", "3/4"),
                 ("1.25", "\\frac{5}{4}"), ("33.3", "100/3"), ("12.50", "12.5"), ("12.5", "\\frac{25}{2}")]:
        add(a, b); add(b, a)
    for n in ["12", "3", "2024", "45", "0", "-7", "1000", "3.5", "0.25", "1,234"]:
        for tr in (FW, AR, EAR, DEV):
            add(n.translate(tr), n)
            add(n, n.translate(tr))
            add("\\text{" + n.translate(tr) + "}", n)
            add(n.translate(tr) + " cm", n)
    for n in ["5", "12", "3.5", "\\frac{1}{2}", "(1,2)", "x+1", "-4", "1,000", "yes", "Monday", "A", "\\sqrt{2}", "2\\pi"]:
        add("\\text{" + n + "}", n); add(n, "\\text{" + n + "}"); add("\\text{ " + n + "}", n)
        add("\\textbf{" + n + "}", n); add("\\mathrm{" + n + "}", n); add("\\text{" + n + "} ", n)
        add(" \\text{" + n + "}", n); add("\\text{" + n + "}\\text{ cm}", n)
    for n, seps in [(1000, None), (12345, None), (1234567, None), (100000, None), (2500, None), (9876543210, None)]:
        s = str(n)
        grp = f"{n:,}"
        for sep in ["_", "\u00a0", "\u202f", " ", ",", "\\,", "{,}", "\\!,", ",\\!", "'", "\\ ", "~", "\u2009"]:
            add(grp.replace(",", sep), s)
            add(s, grp.replace(",", sep))
        add(grp, grp)
        add("1_2_3", "123"); add("12_34", "1234"); add("1__000", "1000"); add("_1000", "1000"); add("1000_", "1000")
    for c in ["5", "\\frac{1}{2}", "12", "x+1", "(1,2)"]:
        add(None, c, wrap="\\fbox{" + c + "}")
        add(None, c, wrap="\\fbox{" + c + "} and \\boxed{" + c + "}")
        add(None, c, wrap="\\boxed{" + c + "} then \\fbox{9}")
        add(None, c, wrap="\\boxed {" + c + "}")
        add(None, c, wrap="\\boxed{ " + c + " }")
        add(None, c, wrap="\\boxed " + c)
        add(None, "\\fbox{" + c + "}", wrap="\\boxed{" + c + "}")
        add(None, "\\boxed{" + c + "}", wrap="\\boxed{" + c + "}")
        add(None, c, wrap="\\boxed{\\boxed{" + c + "}}")
        add(None, c, wrap="\\boxed{" + c)
    for a, b in [("2/4", "1/2"), ("\\frac{2}{4}", "\\frac{1}{2}"), ("4/8", "1/2"), ("\\frac{4}{1}", "4"), ("4/1", "4"),
                 ("\\frac{6}{3}", "2"), ("\\frac{10}{5}", "2"), ("\\frac{-4}{1}", "-4"), ("-4/1", "-4"), ("\\frac{0}{1}", "0"),
                 ("\\frac{3}{6}", "0.5"), ("\\frac{50}{100}", "\\frac{1}{2}"), ("\\frac{9}{12}", "\\frac{3}{4}"), ("3/4", "6/8"),
                 ("\\dfrac{3}{4}", "3/4"), ("\\tfrac34", "\\frac{3}{4}"), ("\\frac{12}{4}", "3"), ("-\\frac{1}{2}", "\\frac{-1}{2}"),
                 ("\\frac{-1}{2}", "-1/2"), ("-1/2", "\\frac{1}{-2}"), ("1/-2", "-1/2"), ("\\frac{1}{2}", "\\frac{2}{4}"),
                 ("2/3", "4/6"), ("10/4", "5/2"), ("5/2", "2.5"), ("7/1", "7"), ("\\frac71", "7"), ("\\frac{a}{1}", "a"),
                 ("\\frac{x}{2}", "x/2"), ("1/2", "0.5"), ("01/2", "1/2"), ("1/02", "1/2"), ("3 1/2", "7/2"),
                 ("3\\frac{1}{2}", "\\frac{7}{2}"), ("3 \\frac{1}{2}", "3.5"), ("-3 1/2", "-7/2"), ("\\frac{100}{1}", "100"),
                 ("\\frac{1000}{10}", "100"), ("\\frac{8}{2}", "\\frac{4}{1}")]:
        add(a, b); add(b, a)
    for a, b in [("0x1A", "26"), ("0x1a", "0x1A"), ("0x1A", "0x1A"), ("1A", "26"), ("0xFF", "255"), ("0b101", "5"),
                 ("0o17", "15"), ("FF", "ff"), ("ff", "255"), ("0x10", "16"), ("0x10", "0x10"), ("x10", "10"),
                 ("1e5", "100000"), ("0x1p4", "16"), ("0X1A", "0x1a"), ("DEADBEEF", "deadbeef"), ("0xdeadbeef", "3735928559"),
                 ("A3", "a3"), ("3A", "3a"), ("10_{16}", "16"), ("1A_{16}", "26"), ("0x1A", "0x1B"), ("12AB", "12ab"),
                 ("0x", "0"), ("0x0", "0"), ("1e", "1"), ("e", "e"), ("2e", "2e"), ("1f", "1")]:
        add(a, b); add(b, a)
    ordinary = [("5", "5"), ("5", "6"), ("-5", "5"), ("x=5", "5"), ("x = 5", "5"), ("y=3", "3"), ("k = -2", "-2"),
                ("\\left(1,2\\right)", "(1,2)"), ("(1, 2)", "(1,2)"), ("(2,1)", "(1,2)"), ("[1,2]", "[1, 2]"), ("(1,2]", "(1,2)"),
                ("[0,\\infty)", "[0, \\infty)"), ("(-\\infty, 3)", "(-\\infty,3)"), ("\\{1,2\\}", "\\{1, 2\\}"),
                ("1,2", "1, 2"), ("2, 1", "1,2"), ("1 and 2", "1,2"), ("1 or 2", "1, 2"), ("(1,2,3)", "(1, 2, 3)"),
                ("\\sqrt{8}", "2\\sqrt{2}"), ("2\\sqrt2", "2\\sqrt{2}"), ("\\sqrt{12}", "2\\sqrt{3}"), ("\\sqrt3", "\\sqrt{3}"),
                ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"), ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),
                ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"), ("2\\pi", "2 \\pi"), ("\\pi r^2", "\\pi r^2"), ("4\\pi", "\\pi \\cdot 4"),
                ("6\\pi", "6 \\times \\pi"), ("\\frac{\\pi}{2}", "\\pi/2"), ("\\frac{\\pi}{4}", "0.785"), ("2x+1", "1+2x"),
                ("x^2+2x+1", "(x+1)^2"), ("x^2-1", "(x-1)(x+1)"), ("2(x+1)", "2x+2"), ("3x", "x3"), ("a+b", "b+a"),
                ("abc", "cba"), ("\\frac{x}{2}", "0.5x"), ("x^{2}", "x^2"), ("x^2", "x**2"), ("2^{10}", "1024"), ("2^10", "1024"),
                ("10^6", "1000000"), ("3 million", "3000000"), ("2.5 billion", "2500000000"), ("1 trillion", "10^12"),
                ("\\$5", "5"), ("$5", "5"), ("\\$5.00", "5"), ("5\\%", "5"), ("50%", "0.5"), ("50\\%", "50"), ("90^\\circ", "90"),
                ("90^{\\circ}", "90"), ("90 degrees", "90"), ("90°", "90"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("1,000", "1000"),
                ("1,000,000", "10^6"), ("12,34", "1234"), ("1,00", "100"), ("0,5", "0.5"), ("Yes", "yes"), ("YES", "yes"),
                ("Monday", "monday"), ("\\text{(A)}", "A"), ("(A)", "A"), ("B", "b"), ("\\textbf{(C)}", "C"),
                ("-2", "- 2"), ("- 2", "-2"), ("−2", "-2"), ("2-", "2"), ("5!", "120"), ("\\binom{5}{2}", "10"),
                ("\\infty", "\\infty"), ("\\emptyset", "\\varnothing"), ("\\le", "\\leq"), ("x \\le 3", "x \\leq 3"),
                ("x>3", "x > 3"), ("(3,\\infty)", "(3, \\infty)"), ("\\frac{3}{2}", "1.5"), ("1\\frac{1}{2}", "1.5"),
                ("\\mathbf{7}", "7"), ("07", "7"), ("007", "7"), ("7.0", "7"), ("7.", "7"), ("+7", "7"), ("  7  ", "7"),
                ("7\n", "7"), ("\\!7", "7"), ("7\\!", "7"), ("\\left[1,2\\right]", "[1,2]"), ("\\{3\\}", "3"), ("{3}", "3"),
                ("{{3}}", "3"), ("3 + 4", "7"), ("3+4", "7"), ("2*3", "6"), ("2 \\cdot 3", "6"), ("2\\times3", "6"),
                ("12 \\div 4", "3"), ("\\sqrt{16}", "4"), ("\\sqrt[3]{8}", "2"), ("\\log_2 8", "3"), ("\\ln 1", "0"),
                ("e^{0}", "1"), ("i^2", "-1"), ("\\sin 0", "0"), ("|x|", "|x|"), ("\\lfloor 3.5 \\rfloor", "3"),
                ("\\text{even}", "even"), ("\\text{No solution}", "no solution"), ("x=2 \\text{ or } x=3", "2, 3"),
                ("2, 3", "x=2, x=3"), ("x=2,3", "2,3"), ("=5", "5"), ("5=5", "5"), ("x=y=5", "5"), ("abc=5", "5"),
                ("\\frac{1}{2}x", "x/2"), ("2^{-1}", "1/2"), ("4^{1/2}", "2"), ("\\frac{1}{3}+\\frac{1}{6}", "\\frac{1}{2}"),
                ("1/3+1/6", "1/2"), ("0.5", "1/2"), ("\\frac12", "0.5"), ("1.0", "1"), ("-0", "0"), ("0", "-0"),
                ("100", "100.0"), ("99.99", "100"), ("1/3", "0.3333"), ("22/7", "\\pi"), ("\\sqrt{2}", "1.414"),
                ("2 \\sqrt{2}", "\\sqrt{8}"), ("\\sqrt{2}\\sqrt{3}", "\\sqrt{6}"), ("\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{2}{3}}"),
                ("3\\sqrt{2}", "\\sqrt{18}"), ("\\sqrt{50}", "5\\sqrt{2}"), ("10\\sqrt{2}", "\\sqrt{200}"),
                ("x^2+y^2", "y^2+x^2"), ("2xy", "2yx"), ("(x+y)^2", "x^2+2xy+y^2"), ("\\frac{a}{b}", "a/b"),
                ("\\pi", "pi"), ("\\frac{22}{7}", "22/7"), ("-\\frac{3}{4}", "-0.75"), ("-.75", "-0.75"), ("-.5", "-1/2"),
                ("1 1/2", "3/2"), ("2 3/4", "11/4"), ("12 34", "1234"), ("1 000", "1000"), ("1 000 000", "1000000"),
                ("\\text{5 cm}", "5"), ("5\\text{ cm}^2", "5"), ("5 \\text{cm}^2", "5"), ("5\\ \\text{cm}", "5"),
                ("5 \\mathrm{cm}", "5"), ("5\\,\\mathrm{cm}", "5"), ("4 \\text{ feet } 3 \\text{ inches}", "51"),
                ("20 \\text{ m}", "20"), ("20 m", "20"), ("20\\text{m}", "20"), ("20 m/s", "20"), ("20 km/h", "20"),
                ("3 hrs", "3"), ("3 hours", "3"), ("3 h", "3"), ("5 ft", "5"), ("5 feet", "5"), ("5 yards", "5"),
                ("2 weeks", "14"), ("6 months", "6"), ("1 year", "1"), ("10 seconds", "10"), ("10 sec", "10"),
                ("45 minutes", "45"), ("7 days", "7"), ("100 cm", "1 meter"), ("5 square feet", "5"), ("5 sq ft", "5"),
                ("5 cm^2", "5"), ("8 cubic inches", "8"), ("12 inches", "1 foot"), ("3 miles", "3"), ("3 mile", "3"),
                ("60 mph", "60"), ("60 miles per hour", "60"), ("5 dollars", "5"), ("5 cents", "5"), ("18 eggs", "18"),
                ("18 apples", "18"), ("18 pages", "18"), ("18 people", "18"), ("18 students", "18")]
    for a, b in ordinary:
        add(a, b); add(b, a)
    # random integer and fraction answers: right and wrong
    for _ in range(60):
        n = random.randint(-500, 5000)
        add(str(n), str(n)); add(str(n + random.choice([1, -1, 10])), str(n))
        add(f"{n:,}", str(n)); add(str(n), f"{n:,}")
    for _ in range(30):
        p, q = random.randint(1, 40), random.randint(2, 40)
        add(f"\\frac{{{p}}}{{{q}}}", f"{p}/{q}"); add(f"{p}/{q}", f"\\dfrac{{{p}}}{{{q}}}")
        add(f"{p/q:.6f}", f"{p}/{q}"); add(f"{p*2}/{q*2}", f"{p}/{q}")
    out = []
    for c in cases:
        resp = c["wrap"] if c["wrap"] is not None else "so the answer is \\boxed{" + c["given"] + "}."
        out.append({"response": resp, "label": c["label"]})
    # deepscaler shapes: </think>, ###Response, neither, labels with \boxed / \fbox
    extra = []
    for r in out[::3]:
        extra.append({"response": "<think>maybe \\boxed{0}</think>" + r["response"], "label": r["label"]})
    for r in out[1::7]:
        extra.append({"response": r["response"], "label": r["label"]})  # no think tag: deepscaler 0
        extra.append({"response": "###Response " + r["response"], "label": "\\boxed{" + r["label"] + "}"})
        extra.append({"response": "</think> " + r["response"], "label": "\\fbox{" + r["label"] + "}"})
        extra.append({"response": r["response"] + "</think> done", "label": r["label"]})
    out += extra
    out.append({"response": "</think>\\boxed{5}", "label": ""})
    out.append({"response": "</think>\\boxed{}", "label": "5"})
    out.append({"response": "</think>\\boxed{}", "label": "\\boxed{}"})
    return out


FW = str.maketrans("0123456789", "０１２３４５６７８９")
AR = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
UNITS = ["cm", "meters", "miles", "hours", "days", "years", "feet", "inches", "degrees", "dollars", "apples", "km",
         "units", "sq ft", "mph", "minutes", "seconds", "weeks", "yards", "m", "kg", "people", "\\text{ cm}",
         "\\text{cm}", "\\mbox{ km}", "\\,\\text{m}", "^\\circ", "\\%", "%", "cm^2", "\\text{ inches}^2", "mi"]
def group(n, sep):
    s = f"{n:,}"
    return s.replace(",", sep)
def render_int(n):
    r = random.random()
    s = str(n)
    opts = [s, s, s + ".0", s + ".00", group(n, ","), group(n, "_"), group(n, "\u00a0"), group(n, "\\,"),
            group(n, "{,}"), s.translate(FW), s.translate(AR), f"{n}e0", hex(n) if n >= 0 else s,
            f"\\frac{{{2*n}}}{{2}}", f"{3*n}/3", f"\\frac{{{n}}}{{1}}", f"{n}.00000001", f"{n}.0000001", f"+{n}" if n >= 0 else s,
            f"{n} " + random.choice(UNITS), f"{n}" + random.choice(UNITS), f"\\text{{{n}}}", f"\\mathrm{{{n}}}",
            f"${n}$", f"\\${n}", f"x = {n}", f"{{{n}}}", f"\\textbf{{{n}}}", f" {n} ", f"{n}\\!", f"{n} \\text{{ {random.choice(['apples','cm','m'])}}}"]
    return random.choice(opts)
def render_frac(p, q):
    from math import gcd
    g = gcd(p, q)
    opts = [f"\\frac{{{p}}}{{{q}}}", f"{p}/{q}", f"\\dfrac{{{p}}}{{{q}}}", f"\\tfrac{{{p}}}{{{q}}}", f"{p/q}", f"{p/q:.4f}",
            f"\\frac{{{p//g}}}{{{q//g}}}", f"{p//g}/{q//g}", f"\\frac{{{2*p}}}{{{2*q}}}", f"{p}\\div{q}", f"\\frac{p}{q}" if p < 10 and q < 10 else f"{p}/{q}",
            f"-\\frac{{{-p}}}{{{q}}}" if p < 0 else f"\\frac{{{p}}}{{{q}}}", f"\\left(\\frac{{{p}}}{{{q}}}\\right)", f"{p}/{q} " + random.choice(UNITS)]
    return random.choice(opts)
def render_irr(k, what):
    if what == "sqrt":
        opts = [f"{k}\\sqrt{{2}}", f"\\sqrt{{{2*k*k}}}", f"{k}\\sqrt2", f"{k} \\sqrt{{2}}", f"{k*1.41421356:.4f}", f"\\sqrt{{{k*k}}}\\sqrt{{2}}", f"{k}*sqrt(2)", f"\\frac{{{2*k}\\sqrt{{2}}}}{{2}}"]
    else:
        opts = [f"{k}\\pi", f"{k} \\pi", f"\\pi {k}", f"{k}\\cdot\\pi", f"{k*3.14159:.3f}", f"{k}pi", f"\\frac{{{2*k}\\pi}}{{2}}", f"{k} \\times \\pi", f"{k}\\pi \\text{{ cm}}^2"]
    return random.choice(opts)
def render_tuple(a, b):
    return random.choice([f"({a},{b})", f"({a}, {b})", f"\\left({a},{b}\\right)", f"[{a},{b}]", f"({b},{a})", f"{a},{b}", f"{a}, {b}", f"({a},{b}]", f"\\{{{a},{b}\\}}", f"x={a}, y={b}", f"{a} and {b}"])
def render_expr(a, b):
    return random.choice([f"{a}x+{b}", f"{b}+{a}x", f"{a}x + {b}", f"x{a}+{b}", f"{a}(x+{b})", f"{a}x+{a*b}", f"{b}+x{a}", f"{a}x^2+{b}", f"{a}x^{{2}}+{b}", f"{a}y+{b}", f"\\frac{{{a}x}}{{2}}+{b}", f"{a/2}x+{b}"])

def renderings(seed, n):
    random.seed(seed)
    pairs = []
    for _ in range(n):
        kind = random.choice(["int", "int", "int", "frac", "irr", "tuple", "expr"])
        if kind == "int":
            n = random.choice([random.randint(0, 20), random.randint(-50, 50), random.randint(100, 99999), random.randint(10**5, 10**8)])
            m = n if random.random() < 0.7 else n + random.choice([1, -1, 10, 1000])
            pairs.append((render_int(m), render_int(n)))
        elif kind == "frac":
            p, q = random.randint(-9, 30), random.randint(2, 12)
            pairs.append((render_frac(p, q), render_frac(p, q) if random.random() < 0.7 else render_frac(p + 1, q)))
        elif kind == "irr":
            k, w = random.randint(1, 9), random.choice(["sqrt", "pi"])
            pairs.append((render_irr(k, w), render_irr(k if random.random() < 0.7 else k + 1, w)))
        elif kind == "tuple":
            a, b = random.randint(-5, 20), random.randint(-5, 20)
            pairs.append((render_tuple(render_int(a) if random.random() < 0.3 else a, b), render_tuple(a, b)))
        else:
            a, b = random.randint(1, 9), random.randint(1, 9)
            pairs.append((render_expr(a, b), render_expr(a, b if random.random() < 0.7 else b + 1)))
    out = []
    for g, t in pairs:
        wrap = random.random()
        if wrap < 0.7: resp = f"Thus the answer is \\boxed{{{g}}}."
        elif wrap < 0.8: resp = f"\\boxed{{1}} no wait \\boxed{{{g}}}"
        elif wrap < 0.85: resp = f"\\fbox{{{g}}}"
        elif wrap < 0.9: resp = f"\\boxed {{{g}}}"
        else: resp = f"<think>\\boxed{{0}}</think> so \\boxed{{{g}}}"
        if random.random() < 0.3: resp = "reasoning</think>" + resp
        label = t if random.random() < 0.85 else f"\\boxed{{{t}}}"
        out.append({"response": resp, "label": label})
    return out


TOK = ["1", "2", "3", "12", "0", "5", "7", "x", "y", "a", "\\frac", "{", "}", "\\sqrt", "\\text{", "\\text{ ", " ", ",", ".",
       "/", "^", "(", ")", "[", "]", "-", "+", "=", "\\!", "\\left", "\\right", "$", "%", "\\%", "cm", "pi", "\\pi", "0x",
       "e", "_", "\u00a0", "１", "٣", "\\dfrac", "\\cdot", "\\times", "meters", "\\circ", "^\\circ", "\\,", "and", " or ",
       "million", "\\infty", "{,}", "\\$", "\\boxed{", "\\fbox{", "\n", "2.5", "1/2", "\\frac{1}{2}", "3\\frac{1}{2}", "!",
       "*", "**", "1e3", "inf", "nan", "day", "ln", "sqrt", "\\mathbb{R}", "~", "\\\\", "\\mbox{", "k", "ab", "\\le", "i"]

def fragments(seed, n):
    random.seed(seed)
    def rnd():
        return "".join(random.choice(TOK) for _ in range(random.randint(1, 7)))
    out = []
    for _ in range(n):
        t = rnd()
        g = t if random.random() < 0.2 else rnd()
        resp = "so \\boxed{" + g + "}" if random.random() < 0.8 else g
        if random.random() < 0.3: resp = "x</think>" + resp
        out.append({"response": resp, "label": t if random.random() < 0.9 else "\\boxed{" + t + "}"})
    return out


A = ["\\frac{\\sqrt{3}}{2}", "(-\\infty, 2]", "x^2+1", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\text{(C)}", "3\\sqrt{2}",
     "\\dfrac{5}{12}", "-\\frac{1}{4}", "\\$1.50", "15\\%", "60^\\circ", "2\\pi", "\\frac{\\pi}{3}", "[-2, 3)", "\\{1, 2, 3\\}",
     "y = 2x + 3", "x \\in [0, 1]", "\\sqrt{5}", "4\\sqrt{3}", "1 + \\sqrt{2}", "\\frac{1 + \\sqrt{5}}{2}", "10!", "\\binom{10}{3}",
     "2^{10}", "e^2", "\\ln 2", "\\log_2 5", "i", "1 - 2i", "3 + 4i", "\\infty", "0.\\overline{3}", "\\frac{7}{9}", "1,\\!000",
     "12{,}345", "\\text{Tuesday}", "\\text{even}", "north", "a^2 - b^2", "(a-b)(a+b)", "\\frac{x+1}{x-1}", "(3, -4)", "(1,2,3)",
     "x=3", "k=-1", "\\frac{25}{4}", "6.25", "\\frac{9}{2}\\text{ square units}", "18\\text{ cm}^2", "48 \\text{ inches}",
     "2,\\!500", "\\sqrt[3]{2}", "2^{1/3}", "\\tfrac{3}{8}", "0.375", "-3", "\\pm 3", "3, -3", "-3, 3", "\\emptyset", "\\mathbb{R}",
     "(-\\infty,\\infty)", "\\frac{1}{2}x", "\\frac x2", "\\cos\\theta", "\\sin^2 x", "\\dfrac{\\sqrt{2}}{2}", "\\frac{\\sqrt2}{2}",
     "\\frac{2}{\\sqrt{8}}", "\\frac{1}{\\sqrt{2}}", "0.7071", "100\\pi", "314.16", "\\frac{3}{4}\\pi", "0.75\\pi", "1.5", "3/2",
     "1\\frac{1}{2}", "\\left(\\frac{1}{2}, 3\\right)", "\\left[ 0, 1 \\right]", "\\$ 20", "20 dollars", "20.00", "2 \\cdot 10^3",
     "2000", "2 \\times 10^{3}", "1.2 \\times 10^5", "120000", "\\text{No}", "no", "\\textbf{(B)} 7", "B", "(B)"]
V = [lambda a: a, lambda a: a.replace("\\frac", "\\dfrac"), lambda a: a.replace(" ", ""), lambda a: " " + a + " ",
     lambda a: "\\left(" + a + "\\right)", lambda a: "$" + a + "$", lambda a: a.replace(",", ", "), lambda a: a + "."]

def math_style(n):
    random.seed(11)
    out = []
    for _ in range(n):
        t = random.choice(A)
        g = random.choice(V)(t if random.random() < 0.5 else random.choice(A))
        out.append({"response": random.choice(["", "<think>x</think>"]) + "So \\boxed{" + g + "}", "label": t if random.random() < 0.9 else "\\boxed{" + t + "}"})
    return out


def unique(rows):
    """rows without repeats of a (response, label) pair, first kept, order kept."""
    seen, kept = set(), []
    for r in rows:
        key = (r["response"], r["label"])
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept


def sets():
    """name -> list of {"response", "label"}."""
    out = {"hand_built": hand_built(), "renderings": renderings(7, 2000) + renderings(99, 5000),
           "math_style": math_style(3000),
           "fragments": fragments(1, 4000) + fragments(2, 4000) + fragments(3, 4000)}
    return {name: unique(rows) for name, rows in out.items()}


# ---- dapo (slime's math_dapo_utils.compute_score): "Answer: ..." lines ------------------
DAPO_VALUES = ["0", "7", "12", "42", "-3", "+5", "1000", "1,000", "12,345", "1,234,567", "3.5", "72.0", "5.", ".5",
               "007", "1e3", "\\frac{1}{2}", "\\frac12", "\\frac123", "\\sqrt2", "\\sqrt{2}", "2\\sqrt3", "\\pi",
               "\\infty", "x", "forty-two", "4 2", "4,2", "1,00", ",5", "١٢", "１２", "²", "½"]
DAPO_WRAPS = ["@", "$@$", "$ @ $", "\\$@", "@ dollars", "@ dollar", "@ units", "@\\text{ units}", "@ cm",
              "@^\\circ", "@^{\\circ}", "@ degrees", "@\\%", "@%", "\\boxed{@}", "\\boxed{ @ }",
              "\\text{@}", "\\textbf{@}", "\\overline{@}", "\\mbox{@}", "x = @", "x=@", "a = b = @",
              "a @", "an @", "@.", "@.$", "@ and 9", "@\\text{and}9", "@,\\text{and}9", "@ \\ldots",
              "@\\;", "@,\\!000", "@{,}000", "\"@\"", "@<|im_end|>", "@<|endoftext|>", "@ square feet",
              "@ ways", "@ students", "@ points", "@\\mathrm{th}", "@\\text{s}", "@\\dots", "(@)",
              "[@]", "@ or @", "\\$ @", "\\ @", "\\text{@} \\text{cm}", "\\boxed{\\text{@}}"]
DAPO_LINES = ["Answer: {}", "answer: {}", "ANSWER : {}", "Answer :{}", "Answer:\n{}", "Answer:  \t{}",
              "The final answer: {}", "Final Answer: {}", "Answer:{}\nmore text", "Answer: 1\nAnswer: {}",
              "Answer: {}\nAnswer: 2", "answer:{} Answer: 3", "Answers: {}", "Answer = {}", "{}"]
DAPO_LABELS = ["0", "7", "12", "42", "-3", "5", "1000", "12345", "1234567", "3", "72", "72.0", "3.5", "1e3",
               "\\boxed{42}", "$42$", "42 dollars", "1,000", "x = 7", "five", "1/2", "\\frac{1}{2}", "", "nan", "inf"]


def dapo_hand_built():
    """Every value in every wrapping, then the answer lines and labels around a few of them."""
    rows = []
    for v in DAPO_VALUES:
        for w in DAPO_WRAPS:
            ans = w.replace("@", v)
            for label in sorted({v.replace(",", "").lstrip("+") or "0", "42", "1000", "3"}):
                rows.append({"response": "Work.\nAnswer: " + ans, "label": label})
    for v in ["42", "1,000", "$7$", "\\boxed{12}", "3.5", "x = 5"]:
        for line in DAPO_LINES:
            for label in DAPO_LABELS:
                rows.append({"response": "Some working.\n" + line.format(v), "label": label})
    return rows


def dapo_truncation():
    """The last 300 characters only: padding that pushes "Answer:" across the cut."""
    rows = []
    for pad in list(range(250, 320)) + [0, 100, 500]:
        for line in ["Answer: 42", "answer: 1,000 dollars", "Answer: \\boxed{7}"]:
            for tail in ["", "\n" + "y" * 10, " " * 5]:
                resp = "x" * pad + "\n" + line + tail
                rows.append({"response": resp, "label": line.split(":")[1].strip().split(" ")[0].strip("\\boxed{}").replace(",", "")})
                rows.append({"response": line + "\n" + "z" * pad, "label": "42"})
    return rows


def dapo_fragments(seed, n):
    """Random strings of answer-ish pieces: what a port gets wrong where no rule was thought of."""
    rnd = random.Random(seed)
    pieces = ["Answer", "answer", ":", " : ", "\n", " ", "=", "$", "\\$", "\\boxed{", "{", "}", "\\text{", "\\textbf{",
              "\\overline{", "\\frac", "\\sqrt", "1", "2", "42", "1,000", ",", ".", "-", "+", "dollars", "cm", "units",
              "a ", "an ", "and", "\\text{and}", "mbox", "\\ ", "^\\circ", "\\%", "x", "(", ")", "\\;", "{,}", "\"",
              "<|im_end|>", "\\ldots", "\\dots", "sue", "squares", "multiples", "\\mathrm{th}", "e3", "０", "٣"]
    rows = []
    for _ in range(n):
        body = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 14)))
        prefix = rnd.choice(["", "Answer: ", "Work\nAnswer:", "answer :"])
        label = rnd.choice(["42", "1000", "1", "2", "12", "-1", "0", "3"])
        rows.append({"response": prefix + body, "label": label})
    return rows


def dapo_sets():
    """name -> list of {"response", "label"} for the dapo grader."""
    out = {"dapo_hand_built": dapo_hand_built(), "dapo_truncation": dapo_truncation(),
           "dapo_fragments": dapo_fragments(11, 6000) + dapo_fragments(12, 6000)}
    return {name: unique(rows) for name, rows in out.items()}
