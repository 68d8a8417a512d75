"""GPU-busy fraction of a Chrome trace (torch.profiler / kineto, rlhost's /start_profile):
the union of the device's kernel, memcpy and memset intervals over the span from the first
to the last of them. 1.0: the GPU never waited; the rest is time the host kept it idle.
Also the same after the trace's last idle gap longer than 1 ms ("steady": a profile that
starts with a prefill includes its first-use stalls of a few ms each; after them, decode).
The profiler itself slows every CUDA graph launch (~0.45 ms each on an H200 with 28
layers, seen 2026-11-28): the fractions are lower bounds for an unprofiled run.

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


def union_fraction(spans):
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


def gpu_spans(path):
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                  for e in load(path) if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATEGORIES)


def busy_fraction(path, steady=False):
    spans = gpu_spans(path)
    if not spans:
        return None
    if steady:
        end = spans[0][1]
        cut = 0
        for i in range(1, len(spans)):
            if spans[i][0] - end > 1000.0:  # microseconds
                cut = i
            end = max(end, spans[i][1])
        spans = spans[cut:]
        if len(spans) < 2:
            return None
    return union_fraction(spans)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        b, s = busy_fraction(p), busy_fraction(p, steady=True)
        print("RESULT impl=trace file=%s gpu_busy=%s gpu_busy_steady=%s"
              % (p, "%.3f" % b if b is not None else "-", "%.3f" % s if s is not None else "-"))
