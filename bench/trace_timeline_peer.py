#!/usr/bin/env python3
"""The peer of bench/trace_timeline.sh: slime's trace-timeline cache build (cache
version 1) in Python, written from its observed behaviour (not from slime's source):
torch.load with a fallback unpickler, per-sample reconstruction (pairing, inferred
parents, open-span clipping, depth/lanes, synthetic PD lanes, round(x, 6)), then
json.dump(ensure_ascii=True, separators=(",", ":")). Its cache equals slime's on the
dumps of tests/data/trace_timeline (bench/trace_timeline.sh checks rlhost's against it).

    python3 bench/trace_timeline_peer.py DUMP.pt OUT.json [PT_PATH GENERATED_AT]
"""
import json
import pickle
import sys
import time

import torch

CACHE_VERSION = 1
PD_ROLES = (
    ("prefill", "P", ("pd_prefill_bootstrap_queue_duration", "pd_prefill_bootstrap_duration",
                      "pd_prefill_alloc_wait_duration", "pd_prefill_forward_duration",
                      "pd_prefill_transfer_queue_duration")),
    ("decode", "D", ("pd_decode_prealloc_duration", "pd_decode_bootstrap_duration", "pd_decode_alloc_wait_duration",
                     "pd_decode_transfer_duration", "pd_decode_forward_duration")),
)


class _Missing:
    def __init__(self, *a, **k):
        pass

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)


class _FallbackUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except Exception:
            return type(name, (_Missing,), {})


class _PickleModule:
    Unpickler = _FallbackUnpickler
    load = pickle.load
    __name__ = "fallback_pickle"


def load_samples(path):
    data = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_PickleModule)
    samples = data["samples"] if isinstance(data, dict) and "samples" in data else data
    out = []
    for s in samples:
        if hasattr(s, "to_dict"):
            s = s.to_dict()
        elif not isinstance(s, dict):
            s = {k: getattr(s, k, None) for k in ("group_index", "index", "prompt", "response", "response_length",
                                                  "reward", "metadata", "source", "status", "label", "trace")}
        out.append(s)
    return out


def _r(x):
    return round(float(x), 6)


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def build_items(trace):
    events, stack = [], []
    for order, ev in enumerate(trace.get("events") or []):
        if not isinstance(ev, dict) or ev.get("ts") is None:
            continue
        try:
            ts = float(ev["ts"])
        except (TypeError, ValueError):
            continue
        sid = _jsonable(ev.get("span_id"))
        events.append({"ts": ts, "order": order, "type": ev.get("type"), "name": _jsonable(ev.get("name")),
                       "span_id": sid, "parent": _jsonable(ev.get("parent_span_id")),
                       "attempt": int(ev.get("attempt", trace.get("attempt", 0)) or 0),
                       "attrs": _jsonable(ev.get("attrs") or {}), "inferred": stack[-1] if stack else None})
        if ev.get("type") == "span_start" and sid:
            stack.append(sid)
        elif ev.get("type") == "span_end" and sid:
            for k in range(len(stack) - 1, -1, -1):
                if stack[k] == sid:
                    del stack[k]
                    break
    if not events:
        return []
    row_end = max(e["ts"] for e in events)
    open_spans, closed, points, orphans = {}, [], [], []
    for e in events:
        parent = e["parent"] or e["inferred"]
        kind = e["type"]
        if kind == "span_start" and e["span_id"]:
            open_spans[e["span_id"]] = {"type": "span", "state": "open_span", "name": e["name"], "start_ts": e["ts"],
                                        "end_ts": None, "display_end_ts": None, "attempt": e["attempt"],
                                        "span_id": e["span_id"], "parent_span_id": parent,
                                        "attrs": {"start_attrs": e["attrs"], "end_attrs": {}}}
        elif kind == "span_end" and e["span_id"] and e["span_id"] in open_spans:
            item = open_spans.pop(e["span_id"])
            item["state"], item["end_ts"], item["display_end_ts"] = "closed_span", e["ts"], e["ts"]
            item["attrs"]["end_attrs"] = e["attrs"]
            closed.append(item)
        elif kind == "span_end":
            orphans.append({"type": "orphan_end", "state": "orphan_end", "name": e["name"], "ts": e["ts"],
                            "attempt": e["attempt"], "span_id": e["span_id"], "parent_span_id": parent,
                            "attrs": e["attrs"]})
        else:
            points.append({"type": "event", "state": "point_event", "name": e["name"], "ts": e["ts"],
                           "attempt": e["attempt"], "span_id": None, "parent_span_id": parent, "attrs": e["attrs"]})
    spans = closed + list(open_spans.values())
    by_id = {s["span_id"]: s for s in spans}
    depth_of = {}
    for s in spans:  # memoised parent-chain length; a repeated id on one walk counts as 0
        walk, sid, base = [], s["span_id"], -1
        while True:
            if sid in depth_of:
                base = depth_of[sid]
                break
            if sid in walk:
                depth_of[sid] = base = 0
                break
            walk.append(sid)
            parent = by_id[sid]["parent_span_id"]
            if not parent or parent not in by_id:
                break
            sid = parent
        for sid in reversed(walk):
            base += 1
            depth_of[sid] = base
    for item in open_spans.values():
        cands = [("row_end", row_end)]
        sib = [s["start_ts"] for s in spans if s is not item and s["parent_span_id"] == item["parent_span_id"]
               and s["start_ts"] > item["start_ts"]]
        if sib:
            cands.append(("next_sibling_start", min(sib)))
        anc, hops = by_id.get(item["parent_span_id"]) if item["parent_span_id"] else None, 0
        while anc is not None and anc["end_ts"] is None and hops <= len(spans):
            anc, hops = by_id.get(anc["parent_span_id"]) if anc["parent_span_id"] else None, hops + 1
        if anc is not None and anc["end_ts"] is not None and anc["end_ts"] > item["start_ts"]:
            cands.append(("ancestor_end", anc["end_ts"]))
        why, end = min(cands, key=lambda c: c[1])
        if end <= item["start_ts"]:
            why, end = "self", item["start_ts"]
        item["display_end_ts"] = end
        item["attrs"]["end_attrs"]["clipped_by"] = why
    items = spans + points + orphans
    for item in items:
        parent = item["parent_span_id"]
        item["parent_span_name"] = by_id[parent]["name"] if parent and parent in by_id else None
        if item["type"] == "span":
            item["depth"] = item["lane"] = depth_of[item["span_id"]]
        else:
            item["depth"] = item["lane"] = depth_of[parent] + 1 if parent in depth_of else 0
    next_lane = max(i["lane"] for i in items)
    for item in closed:
        if str(item["name"] or "").startswith("sglang_pd_"):
            continue
        end_attrs = item["attrs"]["end_attrs"]
        for role, short, keys in PD_ROLES:
            vals = {k: end_attrs[k] for k in keys if isinstance(end_attrs.get(k), (int, float)) and end_attrs[k] > 0}
            if not vals:
                continue
            next_lane += 1
            vals.update(timeline_pd_virtual_role=role, timeline_pd_parent_name=item["name"],
                        timeline_pd_parent_duration=_r(max(0.0, item["end_ts"] - item["start_ts"])))
            items.append({"type": "span", "state": "closed_span", "name": "%s [%s]" % (item["name"], short),
                          "start_ts": item["start_ts"], "end_ts": item["end_ts"],
                          "display_end_ts": item["display_end_ts"], "attempt": item["attempt"],
                          "span_id": "%s:pd:%s" % (item["span_id"], role), "parent_span_id": item["span_id"],
                          "parent_span_name": item["name"], "lane": next_lane, "depth": next_lane,
                          "attrs": {"start_attrs": {}, "end_attrs": vals}})
    for item in items:
        for k in ("start_ts", "end_ts", "display_end_ts", "ts"):
            if item.get(k) is not None:
                item[k] = _r(item[k])
    items.sort(key=lambda i: (i["lane"], i.get("start_ts", i.get("ts")), i.get("display_end_ts", i.get("ts")),
                              i["name"]))
    return [{k: i[k] for k in (SPAN_KEYS if i["type"] == "span" else POINT_KEYS)} for i in items]


SPAN_KEYS = ("type", "state", "name", "start_ts", "end_ts", "display_end_ts", "attempt", "span_id", "parent_span_id",
             "parent_span_name", "lane", "depth", "attrs")
POINT_KEYS = ("type", "state", "name", "ts", "attempt", "span_id", "parent_span_id", "parent_span_name", "lane",
              "depth", "attrs")


def _source(s):
    if s.get("source") not in (None, ""):
        return s["source"]
    meta = s.get("metadata") or {}
    if not isinstance(meta, dict):
        return None
    for k in ("source", "source_name"):
        if meta.get(k) not in (None, ""):
            return meta[k]
    for k, v in meta.items():
        if "source" in str(k).lower() and v not in (None, ""):
            return v
    return None


def _cut(v, n):
    v = _jsonable(v)
    if not isinstance(v, str) or len(v) <= n:
        return v
    return v[:n] + "...<truncated:%d>" % len(v)


def build_cache(pt_path, samples):
    rows = []
    for row_id, s in enumerate(samples):
        trace = s.get("trace")
        if not isinstance(trace, dict):
            continue
        items = build_items(trace)
        if not items:
            continue
        start = min(i.get("start_ts", i.get("ts")) for i in items)
        end = max(i.get("display_end_ts", i.get("ts")) for i in items)
        resp = [int(v) for i in items for a in (i["attrs"], i["attrs"].get("start_attrs"), i["attrs"].get("end_attrs"))
                if isinstance(a, dict) for v in [a.get("response_length")] if isinstance(v, (int, float))]
        states = [i["state"] for i in items]
        reward = s.get("reward")
        rows.append({
            "row_id": row_id, "sample_index": s.get("index", row_id), "group_index": s.get("group_index"),
            "source": _cut(_source(s), 64), "status": _cut(s.get("status"), 64), "label": _cut(s.get("label"), 256),
            "reward": _jsonable(reward) if isinstance(reward, dict) else reward,
            "trace_id": _jsonable(trace.get("trace_id")), "attempt": int(trace.get("attempt", 0) or 0),
            "start": start, "end": end, "duration": _r(max(0.0, end - start)),
            "lane_count": 1 + max(i["lane"] for i in items), "item_count": len(items),
            "closed_span_count": states.count("closed_span"), "open_span_count": states.count("open_span"),
            "point_event_count": states.count("point_event"), "orphan_count": states.count("orphan_end"),
            "total_response_length": sum(resp), "max_response_length": max(resp, default=0), "items": items})
    return {"cache_version": CACHE_VERSION, "pt_path": str(pt_path), "generated_at": time.time(),
            "sample_count": len(rows), "global_start": _r(min(r["start"] for r in rows)) if rows else None,
            "global_end": _r(max(r["end"] for r in rows)) if rows else None, "rows": rows}


def main():
    pt, out = sys.argv[1], sys.argv[2]
    t0, c0 = time.perf_counter(), time.process_time()
    samples = load_samples(pt)
    t1 = time.perf_counter()
    cache = build_cache(pt, samples)
    if len(sys.argv) > 4:  # fixed header fields, for byte comparisons
        cache["pt_path"], cache["generated_at"] = sys.argv[3], float(sys.argv[4])
    t2 = time.perf_counter()
    with open(out, "w") as f:
        json.dump(cache, f, ensure_ascii=True, separators=(",", ":"))
    t3, c3 = time.perf_counter(), time.process_time()
    items = sum(len(r["items"]) for r in cache["rows"])
    print("RESULT impl=python rows=%d items=%d load_s=%.3f build_s=%.3f write_s=%.3f total_s=%.3f cpu_s=%.3f"
          % (len(cache["rows"]), items, t1 - t0, t2 - t1, t3 - t2, t3 - t0, c3 - c0))


if __name__ == "__main__":
    main()
