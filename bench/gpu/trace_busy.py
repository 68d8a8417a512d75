"""GPU-busy fraction of a Chrome trace (torch.profiler / kineto, rlhost's /start_profile):
the union of the device's kernel, memcpy and memset intervals over the span from the first
to the last of them. 1.0: the GPU never waited; the rest is time the host kept it idle.

    python3 trace_busy.py TRACE.json[.gz] ...
"""
import gzip
import json
import sys

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def busy_fraction(path):
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                   for e in load(path) if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATEGORIES)
    if not spans:
        return None
    busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    window = max(e for _, e in spans) - spans[0][0]
    return busy / window if window > 0 else None


if __name__ == "__main__":
    for p in sys.argv[1:]:
        b = busy_fraction(p)
        print("RESULT impl=trace file=%s gpu_busy=%s" % (p, "%.3f" % b if b is not None else "-"))
