"""A local HTTP server standing in for a data mirror (``TDBENCH_DATA_URL``), shared by the download tests."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

import pytest

from suite.data import locate


@contextlib.contextmanager
def local_mirror(handler: type[http.server.BaseHTTPRequestHandler], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) with ``TDBENCH_DATA_URL`` pointing at it; yields that URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/mirror"
    monkeypatch.setenv(locate.URL_VAR, base)
    for var in ("NO_PROXY", "no_proxy"):  # never through a proxy
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    try:
        yield base
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
