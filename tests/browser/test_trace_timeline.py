#!/usr/bin/env python3
"""The trace timeline page in a real browser (headless Chromium driven by Playwright):

  * dumps from tools/trace_timeline/demo_dump.lua (rl.dump + the rollout's trace
    attrs), one with PD timings and one without;
  * tools/trace_timeline.lua serves each dump's folder on a free port; the page
    loads over HTTP and from file:// (it is self-contained);
  * rows are drawn (the page's own count and canvas pixels), a click on a span
    shows its name and duration in the details panel, [P]/[D] lanes are drawn for
    the PD dump only, the text filter narrows the rows;
  * screenshots go to $RLHOST_TEST_ARTIFACTS (default build/test-artifacts).

    RLHOST_BIN=build/rlhost python3 tests/browser/test_trace_timeline.py

Needs the Debian package `chromium` and Playwright from PyPI (scripts/bootstrap.sh
--test-deps installs both; `playwright install` is never run: the system Chromium is
used). Skipped (ctest: Skipped, with the reason) only when Chromium or Playwright is
absent and cannot be installed; under CI=true that fails.
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from support import BIN, SOURCE_DIR, RlhostTestCase  # noqa: E402
import support  # noqa: E402

CHROMIUM = os.environ.get("RLHOST_CHROMIUM", "/usr/bin/chromium")
TOOL = os.path.join(SOURCE_DIR, "tools", "trace_timeline.lua")
DEMO = os.path.join(SOURCE_DIR, "tools", "trace_timeline", "demo_dump.lua")
ARTIFACTS = os.environ.get("RLHOST_TEST_ARTIFACTS") or os.path.join(
    os.path.dirname(BIN) if BIN else os.path.join(SOURCE_DIR, "build"), "test-artifacts")


def _try(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600).returncode == 0
    except Exception:
        return False


def _ensure_chromium():
    """The system Chromium, installed with apt when missing and we may (root or sudo)."""
    if os.access(CHROMIUM, os.X_OK):
        return None
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is not None and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(prefix + ["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        subprocess.run(prefix + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    if os.access(CHROMIUM, os.X_OK):
        return None
    return "%s is missing and `apt-get install chromium` did not work here" % CHROMIUM


def _ensure_playwright():
    try:
        import playwright.sync_api  # noqa: F401
        return None
    except ImportError:
        _try([sys.executable, "-m", "pip", "install", "-q", "playwright"])
    try:
        import playwright.sync_api  # noqa: F401
        return None
    except ImportError as e:
        return "playwright is not importable (%s); run scripts/bootstrap.sh --test-deps" % e


SKIP = _ensure_chromium()
if SKIP is None:
    SKIP = _ensure_playwright()

# Non-background pixels in the timeline area (right of the label column, below the axis).
PIXELS_JS = """() => {
  const c = document.getElementById('canvas'), d = window.devicePixelRatio || 1;
  const x0 = Math.round(330 * d), y0 = Math.round(40 * d), w = c.width - x0, h = Math.min(c.height - y0, Math.round(300 * d));
  const px = c.getContext('2d').getImageData(x0, y0, w, h).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) if (Math.abs(px[i] - px[i + 1]) > 24 || Math.abs(px[i + 1] - px[i + 2]) > 24) n++;
  return n;
}"""


@support.requires(SKIP is None, "browser test: %s" % SKIP,
                  "apt-get install chromium; pip install playwright; or scripts/bootstrap.sh --test-deps")
class TraceTimelineBrowserTest(RlhostTestCase):
    @classmethod
    def setUpClass(cls):
        from playwright.sync_api import sync_playwright
        os.makedirs(ARTIFACTS, exist_ok=True)
        cls.pw = sync_playwright().start()
        cls.browser = cls.pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.pw.stop()

    def make_dump(self, name, *flags, samples=24):
        path = os.path.join(self.dir, name, name + ".pt")
        os.makedirs(os.path.dirname(path))
        subprocess.run([BIN, "--no-control", DEMO, path, "--samples", str(samples)] + list(flags), check=True,
                       env=self.env, capture_output=True, timeout=60)
        return path

    def serve(self, pt):
        """Starts the tool on a free port; returns the page URL it prints."""
        p = subprocess.Popen([BIN, "--no-control", TOOL, pt, "--port", "0"], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        lines = []
        for line in p.stdout:
            lines.append(line)
            m = re.match(r"Serving (http://\S+)", line)
            if m:
                return m.group(1), "".join(lines)
        self.fail("the tool exited without serving:\n" + "".join(lines))

    def open_page(self, url):
        page = self.browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        page.wait_for_function("window.__timeline && window.__timeline.prepared", timeout=30000)
        return page, errors

    def expanded(self, page):
        page.select_option("#view", "expanded")
        page.wait_for_function("window.__timeline.redrawNow() > 0")

    def test_pd_dump(self):
        # 240 rows: more than the page's first part (200 rows), so the rest loads after the first paint
        url, out = self.serve(self.make_dump("pd", "--pd", samples=240))
        self.assertIn("samples: 240", out)
        self.assertTrue(url.startswith("http://127.0.0.1:") and url.endswith("/pd.trace_timeline_viewer.html"), url)
        page, errors = self.open_page(url)
        t = page.evaluate("({rows: __timeline.rowCount, drawn: __timeline.drawnRows, virt: __timeline.virtualLanes})")
        self.assertEqual(t["rows"], 240)
        self.assertGreater(t["drawn"], 5)
        self.assertEqual(t["virt"], 480)  # one [P] and one [D] per sample
        self.assertGreater(page.evaluate(PIXELS_JS), 2000, "bars drawn on the canvas")
        page.screenshot(path=os.path.join(ARTIFACTS, "trace_timeline_pd_collapsed.png"))

        self.expanded(page)
        lanes = set(page.evaluate("__timeline.drawnVirtualLanes"))
        self.assertEqual(lanes, {"sglang_generate [P]", "sglang_generate [D]"})
        loc = page.evaluate("__timeline.locate('sglang_generate', 'closed_span')")
        self.assertIsNotNone(loc, "a sglang_generate bar is on screen")
        page.mouse.click(loc["x"], loc["y"])
        details = page.locator("#details")
        self.assertTrue(details.is_visible())
        text = details.inner_text()
        sel = page.evaluate("__timeline.selected")
        self.assertEqual(sel["name"], "sglang_generate")
        self.assertIn("sglang_generate", text.splitlines()[0])
        self.assertRegex(text, r"duration: \d+(\.\d+)? (ms|s)")
        self.assertIn("completion_tokens", text)
        self.assertIn("PD disaggregation", text)
        self.assertIn("[P] prefill instance", text)
        page.screenshot(path=os.path.join(ARTIFACTS, "trace_timeline_pd_expanded.png"))

        page.fill("#filter", "gsm8k")
        page.wait_for_function("window.__timeline.rowCount < 240")
        self.assertEqual(page.evaluate("__timeline.rowCount"), 80)  # every third sample is gsm8k
        self.assertEqual(errors, [])
        page.close()

    def test_a_real_pd_run(self):
        # One GRPO step on a prefill and a decode engine (slime's --prefill-num-servers):
        # the rollout dump's samples carry the engines' own pd_* timings, drawn as lanes.
        d = self.dir
        recipe = os.path.join(SOURCE_DIR, "recipes", "grpo_gsm8k.lua")
        r = subprocess.run([BIN, "--no-control", recipe, "--prefill-num-servers", "1", "--num-engines", "2",
                            "--engine-mode", "process", "--num-rollout", "1", "--rollout-batch-size", "2",
                            "--n-samples-per-prompt", "4", "--rollout-max-response-len", "24",
                            "--dynamic-sampling-filter", "none", "--threads", "1", "--no-progress",
                            "--eval-interval", "1000", "--metrics-dir", d + "/m",
                            "--save-debug-rollout-data", d + "/dump/r_{rollout_id}.pt"],
                           env=self.env, cwd=d, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        url, out = self.serve(d + "/dump/r_0.pt")
        self.assertIn("samples: 8", out)
        page, errors = self.open_page(url)
        self.assertEqual(page.evaluate("__timeline.virtualLanes"), 16)  # a [P] and a [D] lane per sample
        self.expanded(page)
        self.assertEqual(set(page.evaluate("__timeline.drawnVirtualLanes")), {"sglang_generate [P]", "sglang_generate [D]"})
        self.assertGreater(page.evaluate(PIXELS_JS), 500, "bars drawn on the canvas")
        page.screenshot(path=os.path.join(ARTIFACTS, "trace_timeline_real_pd_run.png"))
        self.assertEqual(errors, [])
        page.close()

    def test_plain_dump_and_file_url(self):
        pt = self.make_dump("plain")
        url, out = self.serve(pt)
        page, errors = self.open_page(url)
        self.assertEqual(page.evaluate("__timeline.rowCount"), 24)
        self.assertEqual(page.evaluate("__timeline.virtualLanes"), 0)
        self.expanded(page)
        self.assertEqual(page.evaluate("__timeline.drawnVirtualLanes"), [])
        self.assertGreater(page.evaluate(PIXELS_JS), 2000)
        loc = page.evaluate("__timeline.locate('engine_decode')")
        self.assertIsNotNone(loc)
        page.mouse.click(loc["x"], loc["y"])
        text = page.locator("#details").inner_text()
        self.assertIn("engine_decode", text)
        self.assertIn("duration:", text)
        self.assertNotIn("PD disaggregation", text)
        page.screenshot(path=os.path.join(ARTIFACTS, "trace_timeline_plain_expanded.png"))
        self.assertEqual(errors, [])
        page.close()
        # The same page straight from disk: the cache is inlined, no server needed.
        html = os.path.join(os.path.dirname(pt), "plain.trace_timeline_viewer.html")
        page, errors = self.open_page("file://" + html)
        self.assertEqual(page.evaluate("__timeline.rowCount"), 24)
        self.assertEqual(errors, [])
        page.close()


if __name__ == "__main__":
    support.main()
