"""The attention explorer (``nmt.demo``) on a shared machine: requests meant for another site
(DNS rebinding, cross-site posts) refused by ``Host``, ``Origin`` and ``Content-Type``; idle and
surplus connections closed without holding a thread; IPv6 loopback; a client that hangs up costs
one log line; and properties: any body and any JSON value get a translation or a one-line 4xx.

Every socket here goes to the test's own server on the loopback interface, in bounded loops."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from conftest import SRC_WORDS, SmokeRun, serving
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nmt.demo import Explorer, Limits, RequestError, make_server
from nmt.errors import ConfigError
from nmt.translator import Translator

if TYPE_CHECKING:
    from nmt.demo import ExplorerServer

TRANSLATE = b'{"text": "ana bel cor"}'


@pytest.fixture(scope="module")
def explorer(smoke_run: SmokeRun) -> Explorer:
    """The trained smoke model (its own beam: 5), allowed beams up to 8."""
    return Explorer({"smoke": Translator.from_checkpoint(smoke_run.checkpoint, device="cpu")},
                    Limits(max_chars=200, max_beam=8), paths={"smoke": str(smoke_run.checkpoint)})  # fmt: skip


@pytest.fixture(scope="module")
def server(explorer: Explorer) -> Iterator[ExplorerServer]:
    with serving(explorer) as httpd:
        yield httpd


@dataclass
class Reply:
    status: int
    body: bytes

    def error(self) -> str:
        """The one-line ``{"error": ...}`` message of a refusal."""
        answer = json.loads(self.body)
        assert list(answer) == ["error"] and answer["error"] and "\n" not in answer["error"], answer
        return answer["error"]


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (the explorer speaks HTTP/1.0: one request a connection)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def _connect(port: int, host: str = "127.0.0.1", timeout: float = 60) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect((host, port))
    return sock


def _request_bytes(port: int, method: str, path: str, headers: dict[str, str | None], body: bytes, host: str) -> bytes:
    literal = f"[{host}]" if ":" in host else host
    fields: dict[str, str | None] = {"Host": f"{literal}:{port}", **headers}
    if method == "POST":
        fields.setdefault("Content-Length", str(len(body)))
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in fields.items() if v is not None), "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def http(port: int, method: str, path: str, headers: dict[str, str | None] | None = None, body: bytes = b"",
         host: str = "127.0.0.1") -> Reply:  # fmt: skip
    """One raw request; ``headers`` name -> value (None leaves it out; Host defaults to ``host:port``)."""
    with _connect(port, host) as sock:
        sock.sendall(_request_bytes(port, method, path, headers or {}, body, host))
        data = _read_all(sock)
    head, _, content = data.partition(b"\r\n\r\n")
    return Reply(int(head.split(b" ", 2)[1]), content)


def post(port: int, body: bytes, **headers: str | None) -> Reply:
    return http(port, "POST", "/api/translate", {"Content-Type": "application/json", **headers}, body)


def _wait_for(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there in time"
        time.sleep(0.02)


# --------------------------------------------------------------------------- Host, Origin, Content-Type


@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "127.0.0.1.evil.example:{port}", "127.0.0.1:{other}", "localhost", "[::1]:{port}",
     "127.0.0.1:{port}@evil.example"],
)  # fmt: skip
def test_a_host_header_naming_another_site_is_refused(server: ExplorerServer, host: str) -> None:
    """DNS rebinding: an attacker's name that resolves to 127.0.0.1 must not read the models (with
    their checkpoint paths) or run translations."""
    port = server.server_address[1]
    value = host.format(port=port, other=port + 1)
    for method, path in (("GET", "/api/models"), ("GET", "/"), ("POST", "/api/translate")):
        reply = http(port, method, path, {"Host": value, "Content-Type": "application/json"}, TRANSLATE)
        assert reply.status == 403, (method, path, reply)
        assert "is not this explorer" in reply.error() and b"checkpoint" not in reply.body


def test_a_missing_or_repeated_host_header_is_refused(server: ExplorerServer) -> None:
    """HTTP/1.0 allows leaving out Host; the explorer asks for it anyway (every browser, curl and
    urllib send it), so that no request goes unchecked."""
    port = server.server_address[1]
    reply = http(port, "GET", "/api/models", {"Host": None})
    assert reply.status == 400 and reply.error() == f"send one Host header (127.0.0.1:{port})"
    with _connect(port) as sock:
        sock.sendall(f"GET /api/models HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\n\r\n".encode())
        assert _read_all(sock).startswith(b"HTTP/1.0 400 ")


@pytest.mark.parametrize("line", [b"\x1f", b"\x1c \x1d", b"\x85", b"\xa0\t"])
def test_a_request_line_of_control_characters_gets_400_and_a_blank_one_nothing(server: ExplorerServer,
                                                                               line: bytes) -> None:  # fmt: skip
    """Python's ``str.split`` takes these characters for spaces, so the standard library would drop
    the request unanswered, as it does a blank line."""
    port = server.server_address[1]
    with _connect(port) as sock:
        sock.sendall(line + b"\r\n\r\n")
        assert _read_all(sock).startswith(b"HTTP/1.0 400 ")
    with _connect(port) as sock:
        sock.sendall(b" \t\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert _read_all(sock) == b""


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost:{port}"])
def test_the_servers_own_names_are_served(server: ExplorerServer, host: str) -> None:
    port = server.server_address[1]
    reply = http(port, "GET", "/api/models", {"Host": host.format(port=port)})
    assert reply.status == 200 and [m["name"] for m in json.loads(reply.body)["models"]] == ["smoke"]


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "http://127.0.0.1:{other}", "https://127.0.0.1:{port}",
               "http://127.0.0.1:{port}.evil.example", "http://localhost:{port}/x"],
)  # fmt: skip
def test_a_cross_origin_request_is_refused(server: ExplorerServer, origin: str) -> None:
    port = server.server_address[1]
    value = origin.format(port=port, other=port + 1)
    reply = post(port, TRANSLATE, Origin=value)
    assert reply.status == 403 and "are refused" in reply.error()
    assert http(port, "GET", "/api/models", {"Origin": value}).status == 403


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_a_same_origin_post_is_translated(server: ExplorerServer, origin: str) -> None:
    port = server.server_address[1]
    reply = post(port, TRANSLATE, Origin=origin.format(port=port))
    assert reply.status == 200 and json.loads(reply.body)["results"][0]["text"]


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
                     "multipart/form-data; boundary=x", "application/jsonp", ""],
)  # fmt: skip
def test_a_post_that_is_not_json_gets_415(server: ExplorerServer, content_type: str | None) -> None:
    """A page on any site may POST text/plain, a form or multipart without the browser asking first
    (no CORS preflight); only application/json needs the preflight, which the explorer never grants."""
    reply = post(server.server_address[1], TRANSLATE, **{"Content-Type": content_type})
    assert reply.status == 415 and reply.error().startswith("send Content-Type: application/json, not ")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_a_json_post_is_translated(server: ExplorerServer, content_type: str) -> None:
    reply = post(server.server_address[1], TRANSLATE, **{"Content-Type": content_type})
    assert reply.status == 200 and json.loads(reply.body)["source"] == "ana bel cor"


@pytest.mark.parametrize(
    "length, status",
    [("\u00b2", 400), ("0x10", 400), ("1e3", 400), ("-5", 400), ("", 400), ("1" * 5000, 413), ("9" * 20, 413),
     ("65537", 413)],
    ids=["superscript-two", "hexadecimal", "exponent", "negative", "empty", "5000-digits", "20-digits", "over"],
)  # fmt: skip
def test_a_malformed_or_oversize_content_length_gets_400_or_413(server: ExplorerServer, length: str,
                                                                 status: int) -> None:  # fmt: skip
    """``str.isdigit`` takes "²" for a digit and ``int`` refuses it, as it refuses 5,000 digits:
    either gave a 500. No body is sent: the server reads none of a refused request's."""
    port = server.server_address[1]
    reply = post(port, b"", **{"Content-Length": length})
    assert reply.status == status, reply
    message = reply.error()
    assert ("is not a byte count" in message) if status == 400 else message.endswith("at most 65,536 are read")
    assert post(port, TRANSLATE).status == 200  # and the server keeps serving


def test_a_missing_or_repeated_content_length_is_refused(server: ExplorerServer) -> None:
    port = server.server_address[1]
    reply = post(port, b"", **{"Content-Length": None})
    assert reply.status == 411 and "with a Content-Length" in reply.error()
    head = f"POST /api/translate HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    with _connect(port) as sock:
        sock.sendall(f"{head}Content-Length: {len(TRANSLATE)}\r\nContent-Length: 5\r\n\r\n".encode() + TRANSLATE)
        assert _read_all(sock).startswith(b"HTTP/1.0 400 ")
    zeros = "0" * 5000 + str(len(TRANSLATE))  # leading zeros: still the body's length
    assert post(port, TRANSLATE, **{"Content-Length": zeros}).status == 200


# --------------------------------------------------------------------------- connections


def test_an_idle_or_stalled_connection_is_closed_after_the_timeout(explorer: Explorer) -> None:
    with serving(explorer, timeout=0.5) as httpd:
        port = httpd.server_address[1]
        headers = {"Content-Type": "application/json", "Content-Length": "100"}
        stalls = [b"", b"GET / HTTP/1.1\r\n",  # nothing, half a request, a body that never comes
                  _request_bytes(port, "POST", "/api/translate", headers, b'{"te', "127.0.0.1")]  # fmt: skip
        for sent in stalls:
            with _connect(port, timeout=10) as sock:
                sock.sendall(sent)
                start = time.monotonic()
                assert _read_all(sock) == b"", "closed without an answer"
                assert time.monotonic() - start < 5
        _wait_for(lambda: httpd.open_connections == 0)
        assert http(port, "GET", "/api/models").status == 200
    with pytest.raises(ConfigError, match="timeout=0"):
        make_server(explorer, "127.0.0.1", 0, timeout=0)


def test_connections_beyond_the_cap_are_closed_at_once_without_a_thread(explorer: Explorer) -> None:
    with serving(explorer, timeout=30, max_connections=4) as httpd:
        port = httpd.server_address[1]
        idle = [_connect(port, timeout=10) for _ in range(4)]
        try:
            _wait_for(lambda: httpd.open_connections == 4)
            threads = threading.active_count()
            for i in range(20):
                with _connect(port, timeout=10) as sock:
                    if i % 2:  # half of them send a request first: a reset then may come before the 503
                        sock.sendall(_request_bytes(port, "GET", "/api/models", {}, b"", "127.0.0.1"))
                    start = time.monotonic()
                    reply = _read_all(sock)
                    assert time.monotonic() - start < 5, "not kept waiting"
                    assert reply == b"" or reply.startswith(b"HTTP/1.0 503 "), reply
                    if i == 0:
                        assert b"too many open connections" in reply
            assert threading.active_count() <= threads and httpd.open_connections == 4
        finally:
            for sock in idle:
                sock.close()
        _wait_for(lambda: httpd.open_connections == 0)
        assert http(port, "GET", "/api/models").status == 200


def _no_ipv6_loopback() -> str | None:
    """Why ::1 cannot be served here, or None when it can."""
    if not socket.has_ipv6:
        return "Python was built without IPv6 (socket.has_ipv6 is False)"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError as e:
        return f"this machine has no IPv6 loopback: binding ::1 fails ({e})"
    return None


@pytest.mark.skipif(_no_ipv6_loopback() is not None, reason=_no_ipv6_loopback() or "")
def test_the_ipv6_loopback_is_served(explorer: Explorer) -> None:
    with serving(explorer, "::1") as httpd:
        port = httpd.server_address[1]
        assert httpd.url == f"http://[::1]:{port}/"
        assert http(port, "GET", "/api/models", host="::1").status == 200
        headers = {"Content-Type": "application/json", "Origin": f"http://[::1]:{port}"}
        reply = http(port, "POST", "/api/translate", headers, TRANSLATE, host="::1")
        assert reply.status == 200 and json.loads(reply.body)["results"][0]["text"]
        assert http(port, "GET", "/api/models", {"Host": f"127.0.0.1:{port}"}, host="::1").status == 403


def test_a_client_that_hangs_up_costs_one_log_line(explorer: Explorer, caplog: pytest.LogCaptureFixture,
                                                   capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    """Three clients send a translation request and reset the connection before the answer."""
    caplog.set_level(logging.INFO, logger="nmt.demo")
    with serving(explorer) as httpd:
        port = httpd.server_address[1]
        request = _request_bytes(port, "POST", "/api/translate", {"Content-Type": "application/json"}, TRANSLATE,
                                 "127.0.0.1")  # fmt: skip
        threads = threading.active_count()
        for _ in range(3):
            sock = _connect(port)
            sock.sendall(request)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
            sock.close()

        def logged() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "nmt.demo"]

        _wait_for(lambda: len(logged()) >= 3 and threading.active_count() <= threads)  # all three handled
    assert "Traceback" not in caplog.text and "Traceback" not in capsys.readouterr().err
    records = logged()
    assert len(records) == 3 and all(r.exc_info is None and "\n" not in r.getMessage() for r in records), records
    assert all(r.getMessage().startswith("127.0.0.1: connection dropped (") for r in records)


# --------------------------------------------------------------------------- properties

_text = st.text(st.characters(exclude_categories=()), max_size=20)  # lone surrogates included
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | _text
json_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                           max_leaves=10)  # fmt: skip
_sentences = st.lists(st.sampled_from(SRC_WORDS), min_size=1, max_size=6).map(" ".join)
_sizes = st.integers(-1, 10) | json_values
requests = json_values | st.fixed_dictionaries(
    {}, optional={"text": _sentences | _text | json_values, "beam_size": _sizes, "n_best": _sizes}
)  # request-shaped objects, most of them translatable


@settings(max_examples=80, deadline=None, database=None)
@given(request=requests)
@example(request={"text": "ana", "n_best": 8})
@example(request={"text": "\ud800"})
@example(request={"text": "ana", "\udfff": 1})
def test_any_json_value_gets_a_translation_or_a_one_line_message(explorer: Explorer, request: object) -> None:
    try:
        answer = explorer.translate(request)
    except RequestError as e:
        assert 400 <= e.status < 500 and str(e) and "\n" not in str(e)
        str(e).encode("utf-8")  # the page can be sent the message as it is
    else:
        assert [r["name"] for r in answer["results"]] == ["smoke"]
        json.dumps(answer, ensure_ascii=False).encode("utf-8")


@settings(max_examples=80, deadline=None, database=None)
@given(body=st.binary(max_size=200) | requests.map(lambda value: json.dumps(value).encode()))
@example(body=b'{"text": "\\ud800"}')
@example(body=b'{"text": "ana", "n_best": 8}')
@example(body=b"[" * 30_000 + b"]" * 30_000)
@example(body=b'{"text": "ana", "beam_size": ' + b"1" * 5000 + b"}")
def test_any_body_gets_a_translation_or_a_one_line_4xx(server: ExplorerServer, body: bytes) -> None:
    reply = post(server.server_address[1], body)
    if reply.status == 200:
        assert [r["name"] for r in json.loads(reply.body)["results"]] == ["smoke"]
    else:
        assert 400 <= reply.status < 500, reply
        reply.error()
