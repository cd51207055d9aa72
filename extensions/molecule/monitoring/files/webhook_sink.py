"""Stand-in for the self-healing receiver: append each POSTed body as one JSON line to a file.

Usage: webhook_sink.py PORT FILE (listens on 127.0.0.1).
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink(BaseHTTPRequestHandler):
    out_path = ""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(self.out_path, "a") as out:
            out.write(json.dumps({"path": self.path, "body": json.loads(body or b"null")}) + "\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args):
        pass


def main() -> None:
    Sink.out_path = sys.argv[2]
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()


if __name__ == "__main__":
    main()
