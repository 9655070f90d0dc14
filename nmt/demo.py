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
    GET  /api/models       [{"name", "checkpoint", "attention", "src_lang", "tgt_lang", "beam_size", "n_best"}]
    POST /api/translate    {"text": str, "beam_size": int, "n_best": int}
                           -> {"results": [{"name", "text", "score", "nbest": [[text, score]], "src_tokens",
                                            "tgt_tokens", "attention": [[weight]] (T x S) or null, "note"}]}

Bad requests get status 400 (413 for a body over 64 KiB) and ``{"error": "<one line>"}``; when more
than ``max_waiting`` requests wait for a translation slot, 503. Translations run ``workers`` at a
time (default one: the model already uses every core).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

import hydra
from omegaconf import DictConfig, OmegaConf

from nmt.errors import ConfigError, command_errors
from nmt.text import CONTROL_CHARACTERS
from nmt.translator import TranslationResult, Translator
from nmt.utils import CONFIG_DIR, parse_named, setup_logging

log = logging.getLogger("nmt.demo")

MAX_BODY_BYTES = 64 * 1024
LOOPBACK = ("127.0.0.1", "localhost", "::1")
NO_ALIGNMENT = (
    "This model has no attention (model.attention=none): its decoder reads one fixed summary vector of the "
    "source, so there is no alignment to draw."
)


class RequestError(ValueError):
    """A request the explorer refuses, with the message the page shows."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


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
            out.append({"name": name, "checkpoint": self.paths.get(name, ""), "attention": t.has_attention,
                        "src_lang": str(t.config.data.src_lang), "tgt_lang": str(t.config.data.tgt_lang),
                        "beam_size": t.settings.beam_size, "n_best": t.settings.n_best})  # fmt: skip
        return out

    def translate(self, request: object) -> dict:
        """Check a ``/api/translate`` request and translate its text with every checkpoint.

        :raise RequestError: a message for the page (empty or over-long text, a bad beam size...).
        """
        text, beam_size, n_best = self._check(request)
        with self._lock:
            if self._waiting >= self.max_waiting:
                raise RequestError("the explorer is busy; try again in a moment", HTTPStatus.SERVICE_UNAVAILABLE)
            self._waiting += 1
        try:
            with self._slots:
                results = {name: t.translate(text, beam_size=beam_size, n_best=n_best, return_attention=True)
                           for name, t in self.translators.items()}  # fmt: skip
        finally:
            with self._lock:
                self._waiting -= 1
        return {"source": text, "results": [self._result(name, r, text) for name, r in results.items()]}

    def _check(self, request: object) -> tuple[str, int, int]:
        if not isinstance(request, dict):
            raise RequestError('send a JSON object: {"text": "...", "beam_size": 5, "n_best": 3}')
        unknown = sorted(set(request) - {"text", "beam_size", "n_best"})
        if unknown:
            raise RequestError(f"unknown field(s) {', '.join(unknown)}; the fields are text, beam_size, n_best")
        text = request.get("text")
        if not isinstance(text, str):
            raise RequestError("text must be a string: the sentence to translate")
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
        return text, beam_size, n_best

    @staticmethod
    def _integer(request: dict, key: str, low: int, high: int) -> int | None:
        value = request.get(key)
        if value is None:
            return None  # the checkpoint's own setting
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RequestError(f"{key}={value!r}: must be a whole number from {low} to {high}")
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


def page() -> bytes:
    """The explorer's HTML page (one file, no external resources)."""
    return resources.files("nmt").joinpath("static", "explorer.html").read_bytes()


def make_server(explorer: Explorer, host: str = "127.0.0.1", port: int = 7860) -> ThreadingHTTPServer:
    """An HTTP server for ``explorer`` bound to ``host:port`` (port 0: any free port); call
    ``serve_forever()`` on it (or in a thread) and ``shutdown()`` to stop it."""
    if host not in LOOPBACK:
        raise ConfigError(f"host={host!r}: the explorer serves the loopback interface only (127.0.0.1 or localhost)")
    html = page()

    class Handler(BaseHTTPRequestHandler):
        server_version = "nmt-explorer"

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, html, "text/html; charset=utf-8")
            elif path == "/api/models":
                self._json(HTTPStatus.OK, {"models": explorer.models(), "max_chars": explorer.limits.max_chars,
                                           "max_beam": explorer.limits.max_beam})  # fmt: skip
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {path}; the explorer is at /"})

        def do_POST(self) -> None:  # noqa: N802
            try:
                if self.path.split("?", 1)[0] != "/api/translate":
                    raise RequestError(f"POST to /api/translate, not {self.path}", HTTPStatus.NOT_FOUND)
                self._json(HTTPStatus.OK, explorer.translate(self._body()))
            except RequestError as e:
                self._json(e.status, {"error": str(e)})
            except Exception as e:  # a bug or a failing model: say so, keep serving
                log.exception("request failed")
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the translation failed: {type(e).__name__}: {e}"})

        def _body(self) -> object:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise RequestError("send the request as JSON with a Content-Length", HTTPStatus.LENGTH_REQUIRED)
            if int(length) > MAX_BODY_BYTES:
                raise RequestError(f"the request has {int(length):,} bytes; at most {MAX_BODY_BYTES:,} are read",
                                   HTTPStatus.REQUEST_ENTITY_TOO_LARGE)  # fmt: skip
            raw = self.rfile.read(int(length))
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise RequestError(f"the request is not valid JSON ({e})") from None

        def _json(self, status: HTTPStatus, obj: dict) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # connections the kernel queues before accept (the default, 5, resets a burst)


def load_explorer(cfg: DictConfig) -> Explorer:
    """The checkpoints of ``cfg.ckpt`` (``[name:PATH, ...]`` or paths), loaded once."""
    named = parse_named(cfg.ckpt, "ckpt")
    translators = {name: Translator.from_checkpoint(path, device=cfg.device, threads=cfg.threads)
                   for name, path in named.items()}  # fmt: skip
    return Explorer(translators, Limits(cfg.max_chars, cfg.max_beam), cfg.workers, cfg.max_waiting, named)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="demo")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        if OmegaConf.is_missing(cfg, "ckpt"):
            raise ConfigError("ckpt is required: python -m nmt.demo ckpt=[runs/a/checkpoints/best.pt,runs/b/...]")
        explorer = load_explorer(cfg)
        server = make_server(explorer, cfg.host, cfg.port)
        host, port = server.server_address[:2]
        log.info("attention explorer for %s: http://%s:%d/ (Ctrl-C stops it)", ", ".join(explorer.translators), host, port)
        try:
            server.serve_forever()
        finally:
            server.server_close()


if __name__ == "__main__":
    main()
