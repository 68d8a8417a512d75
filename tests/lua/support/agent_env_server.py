"""A tiny environment server for rl.agent.http_env (docs/agentic.md, "HTTP environments").

The game: the model may call `calculator`; the server answers each call itself (its own
arithmetic, `ast` with + - * /), and the episode ends on a turn without tool calls or at
turn `max_turns`. Reward 1.0 when the final turn's text contains the label. It also
serves a `count` mode used by tests: every turn gets the observation "turn k", done after
`turns` turns. Usage: agent_env_server.py PORT_FILE [count_turns]

Hostile steps, by the action's text (the /step is logged first, as a server that applied
it would): "DROP" closes the connection without an answer; "SLOW" answers after 5 s;
"BIG" answers with a 20 MB observation; "IDS a,b,..." answers {"ids": [a, b, ...]}.
Connections are kept alive (HTTP/1.1), so a client that resends on a reused connection
shows in the log.
"""
import ast
import json
import operator
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSIONS = {}
LOG = []
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 0


def arith(node):
    if isinstance(node, ast.Expression):
        return arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](arith(node.left), arith(node.right))
    raise ValueError("unsupported expression")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/log":
            return self.answer(200, {"log": LOG, "sessions": len(SESSIONS)})
        self.answer(404, {"error": "no such path"})

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        try:
            req = json.loads(self.rfile.read(n))
        except ValueError:
            return self.answer(400, {"error": "bad JSON"})
        LOG.append({"path": self.path, "body": req})
        sid = req.get("session_id")
        if self.path == "/reset":
            SESSIONS[sid] = {"turn": 0, "label": req["sample"].get("label")}
            return self.answer(200, {"observation": None})
        if self.path == "/close":
            SESSIONS.pop(sid, None)
            return self.answer(200, {})
        if self.path != "/step":
            return self.answer(404, {"error": "no such path " + self.path})
        st = SESSIONS.get(sid)
        if st is None:
            return self.answer(400, {"error": "unknown session " + str(sid)})
        st["turn"] += 1
        action = req["action"]
        text = action.get("content") or ""
        if text == "DROP":
            self.close_connection = True  # no answer at all: the client cannot tell whether it was applied
            return
        if text == "SLOW":
            time.sleep(5)
        if text == "BIG":
            return self.answer(200, {"observation": "x" * (20 << 20), "reward": None, "done": False})
        if text.startswith("IDS "):
            ids = [json.loads(x) for x in text[4:].split(",")]
            return self.answer(200, {"observation": {"ids": ids}, "reward": None, "done": False})
        if COUNT:
            if st["turn"] >= COUNT:
                return self.answer(200, {"observation": None, "reward": 1.0, "done": True})
            return self.answer(200, {"observation": [{"role": "tool", "content": "turn %d" % st["turn"]}],
                                     "reward": None, "done": False})
        calls = action.get("tool_calls") or []
        if not calls:
            good = st["label"] is not None and str(st["label"]) in action["content"]
            return self.answer(200, {"observation": None, "reward": 1.0 if good else 0.0, "done": True})
        obs = []
        for c in calls:
            args = json.loads(c["function"]["arguments"])
            try:
                out = str(arith(ast.parse(str(args.get("expression")), mode="eval")))
            except Exception as e:  # the model's mistake is an observation
                out = "error: %s" % e
            obs.append({"role": "tool", "tool_call_id": c["id"], "content": out})
        return self.answer(200, {"observation": obs, "reward": None, "done": False})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("http://127.0.0.1:%d" % server.server_address[1])
import os  # noqa: E402
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
