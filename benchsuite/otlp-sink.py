#!/usr/bin/env python3
"""A minimal OTLP/HTTP collector for the export-cost benchmarks: it answers 200 to every
POST (traces and metrics alike), reads and discards the body, prints its port on the
first line of stdout, and on SIGINT or SIGTERM prints the POSTs and bytes it took to
stderr. Not a receiver to test against (tests/common's collector decodes what it gets);
only a peer that costs the client nothing but the export itself.

    python3 benchsuite/otlp-sink.py > port.txt & ...  --otlp http://127.0.0.1:$(head -1 port.txt)
"""
import http.server
import signal
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    posts = 0
    bytes = 0

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        Sink.posts += 1
        Sink.bytes += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    print(server.server_address[1], flush=True)

    def stop(*_):
        print(f"otlp-sink: {Sink.posts} POSTs, {Sink.bytes} bytes", file=sys.stderr, flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
