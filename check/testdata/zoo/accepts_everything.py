# A first handler: it reads the delivery, says which step of the run it is,
# and answers 200. Its one mistake: it verifies nothing.
import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ["WEBHOOK_SECRET"]


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        event = json.loads(body)
        print("run", event["data"]["run_id"], event["data"]["status_v2"], flush=True)
        self.answer(200, "ok")


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
