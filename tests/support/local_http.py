"""An in-process HTTP server on a free local port, serving a test's request handler on daemon
threads: the fakes cpersona talks to (an OAuth issuer, an embedding service, the MCP server
behind the stdio bridge)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer:
    """`handler` served at `base` (http://127.0.0.1:PORT) until `close()`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A client that hangs up mid-request must not keep the test process from exiting.
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
