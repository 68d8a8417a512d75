#!/usr/bin/env python3
"""Time to first paint of a trace timeline page in headless Chromium (the system
/usr/bin/chromium via Playwright): the page sets performance.mark("timeline-first-paint")
after its first canvas frame; its startTime is milliseconds since navigation start.
Best and median of REPEAT fresh page loads; also when every row is loaded (the page
paints its first rows while the browser still reads the rest).

    python3 bench/trace_timeline_paint.py PAGE.html [REPEAT]   # prints RESULT what=paint ...
"""
import os
import statistics
import sys

from playwright.sync_api import sync_playwright

html, repeat = os.path.abspath(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
times, parse, start, full = [], [], [], []
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                                args=["--no-sandbox", "--disable-gpu"])
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto("file://" + html, timeout=120000)
        page.wait_for_function("window.__timeline && window.__timeline.ready", timeout=120000)
        times.append(page.evaluate("performance.getEntriesByName('timeline-first-paint')[0].startTime"))
        parse.append(page.evaluate("__timeline.parseMs"))
        start.append(page.evaluate("__timeline.scriptStartMs"))
        page.wait_for_function("window.__timeline.prepared", timeout=120000)
        full.append(page.evaluate("__timeline.preparedMs"))
        rows = page.evaluate("__timeline.rowCount")
        page.close()
    browser.close()
# script_start: the page read and parsed up to its script; json: JSON.parse of the first rows;
# full: every row parsed and prepared (legend, attempts), after the first paint
print("RESULT what=paint rows=%d best_ms=%.0f median_ms=%.0f script_start_ms=%.0f json_ms=%.0f full_ms=%.0f bytes=%d"
      % (rows, min(times), statistics.median(times), statistics.median(start), statistics.median(parse),
         statistics.median(full), os.path.getsize(html)))
