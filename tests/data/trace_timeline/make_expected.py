#!/usr/bin/env python3
"""Writes <dump>.cache.json for each dump with slime's own viewer: the cache that
slime's tools/trace_timeline_viewer.py (CACHE_VERSION 1) builds, with pt_path set to
"dump.pt" and generated_at to 0.0 so the files are stable. slime's source is not part
of this repository: pass the path of its trace_timeline_viewer.py.

    python3 tests/data/trace_timeline/make_expected.py SLIME_VIEWER.py DUMP.pt [DUMP.pt ...]
"""
import importlib.util
import json
import sys
from pathlib import Path


def main():
    spec = importlib.util.spec_from_file_location("slime_viewer", sys.argv[1])
    viewer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(viewer)
    assert viewer.CACHE_VERSION == 1, "expected slime's viewer at cache version 1"
    for pt in sys.argv[2:]:
        cache = viewer._build_cache_data(Path(pt))
        cache["pt_path"], cache["generated_at"] = "dump.pt", 0.0
        out = Path(pt).with_suffix(".cache.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(cache, f, ensure_ascii=True, separators=(",", ":"))
        print(out)


if __name__ == "__main__":
    main()
