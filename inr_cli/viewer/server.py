"""The local web server of `inr view`: the packaged page, a JSON API, and tiles drawn on demand.

The standard library's threading HTTP server is enough for one user's browser. Only these are
served: the packaged static files (looked up by name in a table made at start, so no path from a
request ever reaches the file system), the state and images of the one run or set given, and tiles
whose level and position are checked against the pyramid before anything is drawn.

The page asks for the tiles it wants in batches (/tiles/NET?t=LEVEL-X-Y,...): the answer streams
them as they are drawn, each as a frame of position (4 bytes, big-endian), length (4 bytes) and the
PNG's bytes, in chunked transfer encoding.
"""

from __future__ import annotations

import json
import math
import re
import select
import socket
import struct
from contextlib import closing
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlsplit

from inr_cli.console import error
from inr_cli.viewer.sources import NoSuchNetwork, RunView, SetView
from inr_cli.viewer.tiles import ClientGone, TileJob, TileRenderer

NUMBER = r"(\d{1,9})"
TILE_PATH = re.compile(rf"^/tile/{NUMBER}/{NUMBER}/{NUMBER}/{NUMBER}\.png$")
BATCH_PATH = re.compile(rf"^/tiles/{NUMBER}$")
BATCH_ITEM = re.compile(r"^(\d{1,3})-(\d{1,9})-(\d{1,9})$")
MAX_BATCH = 512  # tiles in one request: several screens' worth
THUMB_PATH = re.compile(rf"^/thumb/{NUMBER}\.png$")
SOURCE_PATH = re.compile(rf"^/source/{NUMBER}\.png$")
SOURCE_TILE_PATH = re.compile(rf"^/source/{NUMBER}/{NUMBER}/{NUMBER}/{NUMBER}\.png$")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".png": "image/png", ".txt": "text/plain; charset=utf-8"}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
IDLE_SECONDS = 60  # a connection that sends or takes nothing for this long is closed, freeing its thread


def static_files() -> dict[str, bytes]:
    """Every packaged file of static/ by its relative name, read once."""
    files: dict[str, bytes] = {}

    def walk(folder, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.rsplit(".", 1)[-1] in ("html", "js", "css", "png", "txt"):
                files[prefix + entry.name] = entry.read_bytes()

    walk(resources.files("inr_cli.viewer") / "static", "")
    return files


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True  # a tile still drawing never holds up Ctrl-C
    block_on_close = False
    idle_timeout = IDLE_SECONDS

    def __init__(self, address, view: RunView | SetView, renderer: TileRenderer):
        self.view = view
        self.renderer = renderer
        self.static = static_files()
        super().__init__(address, Handler)

    def server_close(self) -> None:
        super().server_close()
        self.renderer.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/"


class BadRequest(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the standard library's name
        pass  # one line per tile would bury the address and the errors

    def setup(self):
        self.timeout = self.server.idle_timeout  # the socket's timeout: an idle client lets go of its thread
        super().setup()

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head: bool = False):
        self.head = head
        self.streaming = False  # once a stream has begun, an error can only end the connection
        try:
            if not self._host_allowed():
                return self._send_text(HTTPStatus.FORBIDDEN, "this server answers only to the address it printed")
            parts = urlsplit(self.path)
            self._route(parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()})
        except BadRequest as exc:
            self._send_text(HTTPStatus.BAD_REQUEST, str(exc))
        except NoSuchNetwork:
            self._send_text(HTTPStatus.NOT_FOUND, "no such network")
        except (BrokenPipeError, ConnectionResetError, ClientGone, TimeoutError):
            self.close_connection = True  # the page stopped waiting for these tiles, or stopped reading
        except Exception as exc:  # noqa: BLE001 - one line on the console, the page gets a 500
            error(f"inr view: {self.path}: {exc}")
            if self.streaming:
                self.close_connection = True  # the page sees the stream cut short
            else:
                self._send_text(HTTPStatus.INTERNAL_SERVER_ERROR, "the server failed on this request")

    def _host_allowed(self) -> bool:
        """Bound to loopback, answer only to a loopback name: another site's page cannot reach this
        server through a name of its own that resolves here (DNS rebinding)."""
        if self.server.server_address[0] not in ("127.0.0.1", "::1"):
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        return host in LOOPBACK

    def _route(self, path: str, query: dict) -> None:
        view = self.server.view
        if path in ("/", "/index.html"):
            return self._send_static("index.html")
        if path.startswith("/static/"):
            return self._send_static(path[len("/static/"):])
        if path == "/api/info":
            device = self.server.renderer.backend.name  # the page draws fewer pixels on the CPU
            return self._send_json({"kind": view.kind, "name": view.name, "device": device})
        if path == "/api/state":
            try:
                state = view.state(_integer(query, "net", 0), sort=query.get("sort", "-psnr"),
                                   label=query.get("label") or None, query=query.get("q", ""))
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            return self._send_json(state)
        if path == "/api/networks":
            if not isinstance(view, SetView):
                raise BadRequest("a run has one network; /api/networks lists a set's")
            try:
                page = view.page(query.get("sort", "-psnr"), query.get("label") or None, query.get("q", ""),
                                 _integer(query, "offset", 0), _integer(query, "limit", 60))
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            return self._send_json(page)
        if match := BATCH_PATH.match(path):
            return self._send_batch(int(match.group(1)), query.get("t", ""))
        if match := TILE_PATH.match(path):
            net, level, x, y = (int(v) for v in match.groups())
            shown = view.network(net)
            try:
                width, height, region = shown.pyramid.region(level, x, y)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            data = self.server.renderer.png(("tile", net, shown.version, level, x, y), shown.spec, shown.params,
                                            width, height, region, level)
            # The page names the version in the URL, so a tile of that version never changes.
            current = query.get("v") == shown.version
            return self._send(HTTPStatus.OK, data, "image/png", cache=current)
        if match := THUMB_PATH.match(path):
            net = int(match.group(1))
            shown = view.network(net)
            width, height = view.thumbnail_size(net)
            data = self.server.renderer.png(("thumb", net, shown.version), shown.spec, shown.params, width, height)
            return self._send(HTTPStatus.OK, data, "image/png")
        if match := SOURCE_PATH.match(path):
            image = view.training_image(int(match.group(1)))
            if image is None:
                return self._send_text(HTTPStatus.NOT_FOUND, "the training image is not where it was")
            return self._send(HTTPStatus.OK, image.png, "image/png")
        if match := SOURCE_TILE_PATH.match(path):
            net, level, x, y = (int(v) for v in match.groups())
            image = view.training_image(net)
            if image is None:
                return self._send_text(HTTPStatus.NOT_FOUND, "the training image is not where it was")
            try:
                data = image.tile(level, x, y)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            return self._send(HTTPStatus.OK, data, "image/png")
        self._send_text(HTTPStatus.NOT_FOUND, "not found")

    def _send_batch(self, net: int, wanted: str) -> None:
        """The tiles named in `wanted` (LEVEL-X-Y, comma-separated), streamed as they are drawn."""
        shown = self.server.view.network(net)
        names = wanted.split(",") if wanted else []
        if not 1 <= len(names) <= MAX_BATCH:
            raise BadRequest(f"t names 1 to {MAX_BATCH} tiles as LEVEL-X-Y,LEVEL-X-Y,..., got {len(names)}")
        jobs = []
        for name in names:
            match = BATCH_ITEM.match(name)
            if match is None:
                raise BadRequest(f"t names tiles as LEVEL-X-Y, got '{name[:40]}'")
            level, x, y = (int(v) for v in match.groups())
            try:
                width, height, region = shown.pyramid.region(level, x, y)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            jobs.append(TileJob(("tile", net, shown.version, level, x, y), width, height, region, level))
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.head:
            return
        self.streaming = True
        with closing(self.server.renderer.pngs(shown.spec, shown.params, jobs, gone=self._client_gone)) as tiles:
            for position, data in tiles:
                frame = struct.pack(">II", position, len(data)) + data
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.write(b"0\r\n\r\n")

    def _client_gone(self) -> bool:
        """The page closed the connection (it stopped waiting for a batch): readable with nothing to read."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _send_static(self, name: str) -> None:
        data = self.server.static.get(name)
        if data is None:
            return self._send_text(HTTPStatus.NOT_FOUND, "not found")
        self._send(HTTPStatus.OK, data, CONTENT_TYPES["." + name.rsplit(".", 1)[-1]])

    def _send_json(self, value) -> None:
        self._send(HTTPStatus.OK, json.dumps(_finite(value), allow_nan=False).encode(), "application/json")

    def _send_text(self, status: HTTPStatus, text: str) -> None:
        self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")

    def _send(self, status: HTTPStatus, data: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "max-age=31536000, immutable" if cache else "no-cache")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not self.head:
            self.wfile.write(data)


def _finite(value):
    """JSON has no NaN or infinity (a loss not yet read, a perfect PSNR): they go as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _integer(query: dict, name: str, default: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"\d{1,9}", text):
        raise BadRequest(f"{name} must be a whole number, got '{text[:40]}'")
    return int(text)
