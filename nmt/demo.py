"""The attention explorer: ``python -m nmt.demo ckpt=[a.pt,b.pt] port=7860`` serves a page on
127.0.0.1 where one types a source sentence, chooses the beam size, and sees for every checkpoint,
side by side: the translation, the n-best list with scores, and the attention heatmap (target x
source subwords; hovering a cell shows its weight). A checkpoint with ``attention=none`` says that
it has no alignment instead of drawing zeros.

A page of our own, served by the standard library's threaded HTTP server, rather than Gradio or
Streamlit: the explorer is one form, one JSON call and one heatmap. That is ~150 lines of HTML and
JavaScript (``nmt/static/explorer.html``) with no extra package, server or websocket stack to install. It
starts in a second, listens on the loopback interface only, and the page's every element is ours to
test in a real browser (tests/test_demo.py).

The HTTP interface, for scripts as well as the page:

    GET  /                 the page
    GET  /api/models       [{"name", "checkpoint", "attention", "src_lang", "tgt_lang", "beam_size", "n_best",
                             "cross_attention": [{"layer", "num_layers", "heads", "num_heads"}], "shown"}]
    POST /api/translate    {"text": str, "beam_size": int, "n_best": int}  (Content-Type: application/json)
                           -> {"results": [{"name", "text", "score", "nbest": [[text, score]], "src_tokens",
                                            "tgt_tokens", "attention": [[weight]] (T x S) or null, "note"}]}

``cross_attention`` says which Transformer decoder layer and heads the heatmap averages (an entry for
each Transformer decoder, none for an RNN; ``align.layer`` and ``align.heads`` choose them), ``shown``
the same in words. The page can also read the weights shifted (Shift-Att: target subword t's row is the
attention of the step where t is the decoder's input) and mark each row's most attended source
subword; it does both itself, from the weights it was sent.

Every refusal is ``{"error": "<one line>"}`` with a status: 400 for a bad request (not JSON, nested
too deeply, text that is not valid Unicode, n_best over beam_size, a ``Content-Length`` that is not
one number in digits 0-9...) or a missing ``Host`` header,
403 when ``Host`` names anything but this server (``127.0.0.1:PORT``, ``[::1]:PORT`` or
``localhost:PORT``: a DNS-rebinding page reaches us under its own name) or ``Origin`` is another site,
404 for an unknown path, 411 without a Content-Length, 413 for a body over 64 KiB, 415 for a POST
that is not ``application/json`` (a cross-site form can only send text/plain without asking), and 503
when more than ``max_waiting`` requests wait for a translation slot. A connection idle for
``timeout`` seconds is closed; beyond ``max_connections`` open ones, a new one gets a 503 and is
closed at once, with no thread started for it. Translations run ``workers`` at a time (default one:
the model already uses every core).
"""

from __future__ import annotations

import json
import logging
import reprlib
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from omegaconf import DictConfig, OmegaConf

from nmt.configs import command
from nmt.data.text import CONTROL_CHARACTERS
from nmt.errors import ConfigError, command_errors
from nmt.evaluation.word_alignment import attention_shown, choose_attention, describe_attention
from nmt.runtime import parse_named, setup_logging
from nmt.translator import TranslationResult, Translator

log = logging.getLogger("nmt.demo")

MAX_BODY_BYTES = 64 * 1024
LOOPBACK = ("127.0.0.1", "localhost", "::1")
FIELDS = ("text", "beam_size", "n_best")
HTTP_SPACE = " \t\x0b\x0c"  # ASCII whitespace (CR and LF end the line): a request line of only these is blank
NO_ALIGNMENT = (
    "This model has no attention (model.attention=none): its decoder reads one fixed summary vector of the "
    "source, so there is no alignment to draw."
)
_BRIEF = reprlib.Repr()  # attributes, not keywords: Python 3.10 and 3.11 take none
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong, _BRIEF.maxlist, _BRIEF.maxdict = 2, 40, 40, 40, 4, 4


class RequestError(ValueError):
    """A request the explorer refuses, with the message the page shows."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def brief(value: object) -> str:
    """``value`` for a one-line message: short, escaped (no newline, no lone surrogate), and never an
    error itself, since ``repr`` of an integer over 4,300 digits raises ValueError."""
    try:
        return _BRIEF.repr(value)
    except ValueError:
        return f"<{type(value).__name__} too long to show>"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (the ``demo`` config's keys of the same names)."""

    max_chars: int = 1000
    max_beam: int = 20


class Explorer:
    """Named translators answering the explorer's requests (no HTTP here: see :func:`make_server`).

    :param translators: display name -> loaded checkpoint, in the order the page shows them.
    :param limits: the largest input and beam a request may ask for.
    :param workers: translations running at the same time.
    :param max_waiting: requests allowed to wait for a slot; beyond that, 503.
    :param paths: display name -> checkpoint file, shown under the name.
    """

    def __init__(self, translators: dict[str, Translator], limits: Limits, workers: int = 1, max_waiting: int = 64,
                 paths: dict[str, str] | None = None) -> None:  # fmt: skip
        if not translators:
            raise ConfigError("ckpt: give at least one checkpoint, e.g. ckpt=[runs/x/checkpoints/best.pt]")
        self.translators, self.limits, self.max_waiting = translators, limits, max_waiting
        self.paths = paths or {}
        self._slots = threading.BoundedSemaphore(workers)
        self._waiting, self._lock = 0, threading.Lock()

    def models(self) -> list[dict]:
        """What the page needs to know about each checkpoint before the first request."""
        out = []
        for name, t in self.translators.items():
            shown = attention_shown(t.model)
            out.append({"name": name, "checkpoint": self.paths.get(name, ""), "attention": t.has_attention,
                        "src_lang": str(t.config.data.src_lang), "tgt_lang": str(t.config.data.tgt_lang),
                        "beam_size": t.settings.beam_size, "n_best": t.settings.n_best,
                        "cross_attention": shown, "shown": describe_attention(shown)})  # fmt: skip
        return out

    def translate(self, request: object) -> dict:
        """Check a ``/api/translate`` request (any JSON value) and translate its text with every checkpoint.

        :raise RequestError: a message for the page (empty or over-long text, a bad beam size...).
        """
        text, beam_size, n_best = self._check(request)
        with self._lock:
            if self._waiting >= self.max_waiting:
                raise RequestError("the explorer is busy; try again in a moment", HTTPStatus.SERVICE_UNAVAILABLE)
            self._waiting += 1
        try:
            with self._slots:
                # without n_best, each checkpoint's own, cut to a smaller beam the request asks for
                results = {name: t.translate(text, beam_size=beam_size, return_attention=True,
                                             n_best=n_best or min(t.settings.n_best, beam_size or t.settings.beam_size))
                           for name, t in self.translators.items()}  # fmt: skip
        finally:
            with self._lock:
                self._waiting -= 1
        return {"source": text, "results": [self._result(name, r, text) for name, r in results.items()]}

    def _check(self, request: object) -> tuple[str, int | None, int | None]:
        if not isinstance(request, dict):
            raise RequestError('send a JSON object: {"text": "...", "beam_size": 5, "n_best": 3}')
        unknown = sorted((brief(k) if not isinstance(k, str) or not k.isidentifier() else k[:40])
                         for k in request if k not in FIELDS)  # fmt: skip
        if unknown:
            raise RequestError(f"unknown field(s) {', '.join(unknown)}; the fields are text, beam_size, n_best")
        text = request.get("text")
        if not isinstance(text, str):
            raise RequestError("text must be a string: the sentence to translate")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON may escape half a surrogate pair ("\ud800"); no tokenizer reads it
            raise RequestError(f"the text is not valid Unicode: character {e.start + 1} is a lone surrogate "
                               f"(U+{ord(text[e.start]):04X})") from None  # fmt: skip
        text = " ".join(CONTROL_CHARACTERS.sub(" ", text).split())  # one line, control characters removed
        if not text:
            raise RequestError("Type a sentence to translate.")
        if len(text) > self.limits.max_chars:
            raise RequestError(
                f"The text has {len(text):,} characters; the explorer translates up to {self.limits.max_chars:,} "
                "at a time. Shorten it, or use python -m nmt.translate."
            )
        beam_size = self._integer(request, "beam_size", 1, self.limits.max_beam)
        n_best = self._integer(request, "n_best", 1, beam_size or self.limits.max_beam)
        if beam_size is None and n_best is not None:  # then each checkpoint searches with its own beam
            for name, t in self.translators.items():
                if n_best > t.settings.beam_size:
                    raise RequestError(f"n_best={n_best} must be <= beam_size, which is {t.settings.beam_size} for "
                                       f"{name} (its checkpoint's default); send a beam_size as well")  # fmt: skip
        return text, beam_size, n_best

    @staticmethod
    def _integer(request: dict, key: str, low: int, high: int) -> int | None:
        value = request.get(key)
        if value is None:
            return None  # the checkpoint's own setting
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RequestError(f"{key}={brief(value)}: must be a whole number from {low} to {high}")
        return value

    def _result(self, name: str, r: TranslationResult, text: str) -> dict:
        attention = None if r.attention is None else [[round(float(w), 4) for w in row] for row in r.attention]
        translator = self.translators[name]
        note = "" if translator.has_attention else NO_ALIGNMENT
        limit = int(translator.config.data.max_len)
        if len(translator.src_vocab.encode([text])[0]) > limit:
            note = (note + " " if note else "") + f"Only the first {limit} subwords of the source were translated."
        return {"name": name, "text": r.text, "score": round(r.score, 4), "nbest": [[t, round(s, 4)] for t, s in r.nbest],
                "src_tokens": r.src_tokens, "tgt_tokens": r.tgt_tokens, "attention": attention, "note": note}  # fmt: skip


def body_length(values: list[str]) -> int:
    """The body's size from the request's ``Content-Length`` headers.

    :raise RequestError: 411 without one; 400 for more than one, or one that is not ASCII digits
        (``²`` is a digit to ``str.isdigit``, not to ``int``); 413 over :data:`MAX_BODY_BYTES`,
        however many digits it has (``int`` refuses over 4,300).
    """
    if not values:
        raise RequestError("send the request as JSON with a Content-Length", HTTPStatus.LENGTH_REQUIRED)
    length = values[0].strip()
    if len(values) > 1 or not (length.isascii() and length.isdigit()):
        shown = brief(values[0]) if len(values) == 1 else f"{len(values)} times"
        raise RequestError(f"Content-Length {shown} is not a byte count; send one, in digits 0-9")
    digits = length.lstrip("0") or "0"
    if len(digits) > len(str(MAX_BODY_BYTES)) or int(digits) > MAX_BODY_BYTES:
        shown = f"{int(digits):,}" if len(digits) <= 20 else f"a {len(digits):,}-digit number of"
        raise RequestError(f"the request has {shown} bytes; at most {MAX_BODY_BYTES:,} are read",
                           HTTPStatus.REQUEST_ENTITY_TOO_LARGE)  # fmt: skip
    return int(digits)


def page() -> bytes:
    """The explorer's HTML page (one file, no external resources)."""
    return resources.files("nmt").joinpath("static", "explorer.html").read_bytes()


def parse_body(raw: bytes) -> object:
    """The JSON value of a request body.

    :raise RequestError: for bytes that are not UTF-8 JSON, or JSON nested deeper than the parser's
        recursion limit (~1,000 levels), which would otherwise surface as a RecursionError.
    """
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise RequestError("the JSON is nested too deeply; send one flat object") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the request is not valid JSON ({e})") from None
    except ValueError:  # Python reads no integer over 4,300 digits (CVE-2020-10735)
        raise RequestError("the JSON has a number too long to read (over 4,300 digits)") from None


def make_server(explorer: Explorer, host: str = "127.0.0.1", port: int = 7860, timeout: float = 20.0,
                max_connections: int = 32) -> ExplorerServer:  # fmt: skip
    """An HTTP server for ``explorer`` bound to ``host:port`` (port 0: any free port); call
    ``serve_forever()`` on it (or in a thread) and ``shutdown()`` to stop it.

    :param host: 127.0.0.1, localhost (bound as 127.0.0.1) or ::1.
    :param timeout: seconds a connection may wait on the client (request, body, reading the answer).
    :param max_connections: open connections at most; one more gets a 503 and is closed at once.
    """
    if host not in LOOPBACK:
        raise ConfigError(f"host={host!r}: the explorer serves the loopback interface only (127.0.0.1, localhost or ::1)")
    if not timeout > 0:
        raise ConfigError(f"timeout={timeout!r}: must be a number of seconds > 0")
    if max_connections < 1:
        raise ConfigError(f"max_connections={max_connections!r}: must be at least 1")
    return ExplorerServer(host, port, _handler(explorer, timeout), max_connections)


def _handler(explorer: Explorer, idle_timeout: float) -> type[BaseHTTPRequestHandler]:
    html = page()

    class Handler(BaseHTTPRequestHandler):
        server: ExplorerServer
        server_version = "nmt-explorer"
        # the version of a reply to a request line that cannot be read: HTTP/1.0, so that the reply
        # has a status line (the standard library's default, HTTP/0.9, sends a bare error page)
        default_request_version = "HTTP/1.0"
        timeout = idle_timeout  # StreamRequestHandler.setup puts it on the socket
        body_read = False

        def parse_request(self) -> bool:
            """The standard library's parsing, except for a request line of characters that
            ``str.split`` takes for spaces but HTTP does not (``\\x1c``-``\\x1f``, ``\\x85``, ``\\xa0``):
            the standard library drops it unanswered, as if blank; it is a request line that
            cannot be read, and gets 400."""
            line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            if line.strip(HTTP_SPACE) and not line.split():
                self.command, self.request_version, self.close_connection = None, self.default_request_version, True
                self.requestline = line
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request line {line!r}")
                return False
            return super().parse_request()

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            self._answer(self._get)

        def do_POST(self) -> None:  # noqa: N802
            self._answer(self._post)

        def _answer(self, respond: Callable[[], tuple[HTTPStatus, bytes, str]]) -> None:
            try:
                self._check_sender()
                self._send(*respond())
            except RequestError as e:
                self._drain()
                self._json(e.status, {"error": str(e)})
            except (ConnectionError, TimeoutError):
                raise  # the client hung up or stalled: ExplorerServer.handle_error logs one line
            except Exception as e:  # a bug or a failing model: say so, keep serving
                log.exception("request failed")
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the translation failed: {type(e).__name__}: {e}"})

        def _check_sender(self) -> None:
            """Refuse a request meant for another site. A DNS-rebinding page reaches this port under
            its own name, which it cannot keep out of ``Host``; a page elsewhere sends its ``Origin``."""
            hosts = self.headers.get_all("Host") or []
            if len(hosts) != 1:
                raise RequestError(f"send one Host header ({self.server.authorities[0]})")
            if hosts[0].lower() not in self.server.authorities:
                raise RequestError(f"Host {brief(hosts[0])} is not this explorer; open {self.server.url}",
                                   HTTPStatus.FORBIDDEN)  # fmt: skip
            for origin in self.headers.get_all("Origin") or []:
                if origin.lower() not in self.server.origins:
                    raise RequestError(f"requests from {brief(origin)} are refused; open {self.server.url}",
                                       HTTPStatus.FORBIDDEN)  # fmt: skip

        def _get(self) -> tuple[HTTPStatus, bytes, str]:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                return HTTPStatus.OK, html, "text/html; charset=utf-8"
            if path == "/api/models":
                return self._encoded(HTTPStatus.OK, {"models": explorer.models(), "max_chars": explorer.limits.max_chars,
                                                     "max_beam": explorer.limits.max_beam})  # fmt: skip
            raise RequestError(f"no page {brief(path)}; the explorer is at /", HTTPStatus.NOT_FOUND)

        def _post(self) -> tuple[HTTPStatus, bytes, str]:
            if self.path.split("?", 1)[0] != "/api/translate":
                raise RequestError(f"POST to /api/translate, not {brief(self.path)}", HTTPStatus.NOT_FOUND)
            # a cross-site page may POST text/plain without the browser asking first; application/json it may not
            media_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if media_type != "application/json":
                raise RequestError(f"send Content-Type: application/json, not {brief(media_type or None)}",
                                   HTTPStatus.UNSUPPORTED_MEDIA_TYPE)  # fmt: skip
            raw = self.rfile.read(body_length(self.headers.get_all("Content-Length") or []))
            self.body_read = True
            return self._encoded(HTTPStatus.OK, explorer.translate(parse_body(raw)))

        def _drain(self) -> None:
            """Read a refused request's body (when small), so that closing the socket with unread data
            does not reset the connection before the client reads the error."""
            if self.body_read:
                return
            try:
                length = body_length(self.headers.get_all("Content-Length") or [])
            except RequestError:
                return  # none, malformed or too long: nothing is read
            self.rfile.read(length)

        def _json(self, status: HTTPStatus, obj: dict) -> None:
            self._send(*self._encoded(status, obj))

        @staticmethod
        def _encoded(status: HTTPStatus, obj: dict) -> tuple[HTTPStatus, bytes, str]:
            # backslashreplace: a lone surrogate left in a string becomes the JSON escape \udXXX, not an error
            body = json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace")
            return status, body, "application/json; charset=utf-8"

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

    return Handler


def _busy_reply() -> bytes:
    body = b'{"error": "the explorer has too many open connections; try again in a moment"}'
    return (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip


class ExplorerServer(ThreadingHTTPServer):
    """The threaded server on one loopback address, IPv4 or IPv6, with at most ``max_connections``
    connections (one thread each) open at a time.

    :ivar authorities: the ``Host`` values that name this server, e.g. ``127.0.0.1:7860``, ``localhost:7860``.
    :ivar origins: the same as ``Origin`` values (``http://`` + authority).
    """

    request_queue_size = 128  # connections the kernel queues before accept (the default, 5, resets a burst)
    daemon_threads = True
    busy_reply = _busy_reply()

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler], max_connections: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET  # the class default is IPv4 only
        self.max_connections, self.open_connections, self._count_lock = max_connections, 0, threading.Lock()
        self._refusing = False  # one log line per stretch at the cap, not one per refused connection
        super().__init__((host, port), handler)
        address, port = self.server_address[:2]
        literal = f"[{address}]" if self.address_family == socket.AF_INET6 else address
        names = (literal, "localhost")
        # browsers leave out the port in Host and Origin when it is 80
        self.authorities = tuple(f"{n}:{port}" for n in names) + (names if port == 80 else ())
        self.origins = tuple(f"http://{a}" for a in self.authorities)
        self.url = f"http://{literal}:{port}/"

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        with self._count_lock:
            full = self.open_connections >= self.max_connections
            if full:
                first, self._refusing = not self._refusing, True
            else:
                self.open_connections += 1
        if full:
            if first:
                log.warning("%d connections are open (max_connections): new ones get 503 until some close",
                            self.max_connections)  # fmt: skip
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # the thread did not start
            self._closed()
            raise

    def process_request_thread(self, request: socket.socket, client_address: tuple) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        with self._count_lock:
            self.open_connections -= 1
            self._refusing = False

    def _refuse(self, request: socket.socket) -> None:
        """Answer 503 and close, in the accepting thread and without waiting on the client."""
        try:
            request.setblocking(False)
            request.recv(MAX_BODY_BYTES)  # whatever arrived already: unread data would reset the connection
        except OSError:
            pass
        try:
            request.send(self.busy_reply)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: socket.socket, client_address: tuple) -> None:
        """One log line for a client that hung up or stalled (the standard library prints a traceback)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            log.info("%s: connection dropped (%s: %s)", client_address[0], type(error).__name__, error)
        else:
            log.exception("request from %s failed", client_address[0])


def choose_layers(translators: dict[str, Translator], layer: int | None, heads: list[int] | None) -> None:
    """Show the cross-attention of Transformer decoder layer ``layer``, averaged over ``heads``, in
    every checkpoint with a Transformer decoder (an RNN decoder keeps its one attention).

    :raise ConfigError: a layer or head a checkpoint does not have, or a choice (not None) when no
        checkpoint has a Transformer decoder.
    """
    if layer is None and heads is None:
        return
    chosen = [t for t in translators.values() if attention_shown(t.model)]
    if not chosen:
        raise ConfigError("align.layer and align.heads choose a Transformer decoder's cross-attention; no checkpoint "
                          "given has one (an RNN decoder has one attention)")  # fmt: skip
    for t in chosen:
        choose_attention(t.model, layer, heads)


def load_explorer(cfg: DictConfig) -> Explorer:
    """The checkpoints of ``cfg.ckpt`` (``[name:PATH, ...]`` or paths; ``a.pt+b.pt`` an ensemble), loaded once."""
    named = parse_named(cfg.ckpt, "ckpt")
    translators = {name: Translator.from_checkpoint(path, device=cfg.device, threads=cfg.threads,
                                                    ensemble_rule=cfg.ensemble_rule, precision=cfg.precision)
                   for name, path in named.items()}  # fmt: skip
    heads = None if cfg.align.heads is None else list(cfg.align.heads)
    choose_layers(translators, cfg.align.layer, heads)
    return Explorer(translators, Limits(cfg.max_chars, cfg.max_beam), cfg.workers, cfg.max_waiting, named)


@command("demo")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        if OmegaConf.is_missing(cfg, "ckpt"):
            raise ConfigError("ckpt is required: python -m nmt.demo ckpt=[runs/a/checkpoints/best.pt,runs/b/...]")
        explorer = load_explorer(cfg)
        server = make_server(explorer, cfg.host, cfg.port, cfg.timeout, cfg.max_connections)
        log.info("attention explorer for %s: %s (Ctrl-C stops it)", ", ".join(explorer.translators), server.url)
        try:
            server.serve_forever()
        finally:
            server.server_close()


if __name__ == "__main__":
    main()
