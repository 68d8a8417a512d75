"""A worker that streams for the router's tests: POST /generate answers server-sent
events, one every 50 ms ("data: {"i": k}"), `count` of them (from the JSON body; default
100) and then "data: [DONE]"; GET /health answers ok. Chunked HTTP/1.1, a thread per
connection; it stops writing when the client goes. Writes its URL to PORT_FILE.
Usage: stream_worker.py PORT_FILE
"""
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for i in range(int(req.get("count", 100))):
                self.chunk(b"data: %s\n\n" % json.dumps({"i": i}).encode())
                time.sleep(0.05)
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("http://127.0.0.1:%d" % server.server_address[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
