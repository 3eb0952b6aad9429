"""The HTTP server of ``pregel view``: the model viewer, or the dashboard of a training run.

A ``ThreadingHTTPServer`` (standard library) on 127.0.0.1 by default. Viewer routes: ``/`` (the page),
``/model.json`` and ``/model.bin`` (``odin_sched.view.model``); dashboard routes: ``/`` (the page),
``/status.json`` and ``/heldout.png`` (the newest status file of the watched folder,
``odin_sched.training.status``). The pages' scripts are files of ``static/`` in the installed package.
"""
import errno
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pregel.errors import InputError, warn

STATIC = os.path.join(os.path.dirname(__file__), "static")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css",
         ".json": "application/json", ".bin": "application/octet-stream", ".png": "image/png"}


def static_file(name: str) -> bytes:
    """The bytes of the packaged page file ``name``."""
    with open(os.path.join(STATIC, name), "rb") as f:
        return f.read()


def viewer_routes(model_bin: bytes, model_json: bytes) -> dict:
    """path -> function returning the bytes served (None: 404) for the model viewer."""
    routes = {"/model.bin": lambda: model_bin, "/model.json": lambda: model_json, "/": _static("viewer.html")}
    routes.update({f"/{n}": _static(n) for n in ("viewer.js", "sort_worker.js", "style.css")})
    return routes


def dashboard_routes(folder) -> dict:
    """path -> function returning the bytes served (None: 404) for the dashboard of runs writing into ``folder``."""
    from odin_sched.training.status import latest_status

    def newest(png: bool):
        path = latest_status(folder)
        if path is None:
            return b"{}" if not png else None
        if png:
            path = path[:-len(".json")] + ".png"
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:  # a status without a PNG yet
            return None

    routes = {"/": _static("dashboard.html"), "/status.json": lambda: newest(False),
              "/heldout.png": lambda: newest(True)}
    routes.update({f"/{n}": _static(n) for n in ("dashboard.js", "style.css")})
    return routes


def _static(name: str):
    return lambda: static_file(name)


def _handler(routes: dict):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            body = routes[path]() if path in routes else None
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", TYPES.get(os.path.splitext(path)[1] or ".html", "text/plain"))
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # no line per request
            pass

    return Handler


def make_server(routes: dict, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A bound server for ``routes``; a port in use (or a host it cannot bind) raises one InputError line.
    Any host but the local ones gets a warning: the pages are then reachable from other machines."""
    if host not in LOCAL_HOSTS:
        warn(f"--host {host}: serving to other machines, not only this one (there is no access control)")
    try:
        server = ThreadingHTTPServer((host, port), _handler(routes))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise InputError(f"port {port} on {host} is in use; choose another port") from None
        raise InputError(f"cannot listen on {host}:{port} ({err.strerror or err})") from None
    server.daemon_threads = True
    return server


def url(server: ThreadingHTTPServer) -> str:
    """The page's address."""
    host, port = server.server_address[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


def serve(server: ThreadingHTTPServer, what: str) -> None:
    """Serve until Ctrl-C, which stops with one line."""
    try:  # the line first: Ctrl-C may come as soon as it is read
        print(f"pregel view: {what} at {url(server)} (Ctrl-C to stop)", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("pregel view: stopped", file=sys.stderr, flush=True)
    finally:
        server.server_close()


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    """Serve from a daemon thread (the training dashboard: it ends with the process)."""
    thread = threading.Thread(target=server.serve_forever, name="pregel-dashboard", daemon=True)
    thread.start()
    return thread
