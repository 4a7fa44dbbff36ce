# A webhook handler as a user writes it (as check/testdata/zoo/correct.py):
# the raw body, t in Unix milliseconds inside the window, the secret as it
# is, compare_digest. When the signature verifies it answers 200 with what
# it got, as JSON, so that a test reads from the recorded answer what
# reached the handler.
import hashlib
import hmac
import json
import os
import re
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ["WEBHOOK_SECRET"]


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, text, content_type="text/plain; charset=utf-8"):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        header = self.headers.get("service-signature")
        if not header:
            return self.answer(401, "Unauthorized: Missing Signature")
        parts = header.split(",")
        if len(parts) != 2 or not re.fullmatch(r"t=[0-9]+", parts[0]) or not parts[1].startswith("v1="):
            return self.answer(401, "Unauthorized: Invalid Signature Format")
        t, v1 = parts[0][2:], parts[1][3:]
        now = int(time.time() * 1000)
        if not (now - 300000 < int(t) <= now + 60000):
            return self.answer(401, "Unauthorized: Invalid Time Value")
        expected = hmac.new(SECRET.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(v1.encode(), expected.encode()):
            return self.answer(401, "Unauthorized: Invalid signature")
        got = {"body": body.decode("utf-8", "replace"), "headers": [[k, v] for k, v in self.headers.items()]}
        self.answer(200, json.dumps(got), "application/json")

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
