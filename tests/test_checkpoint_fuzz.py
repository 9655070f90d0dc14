"""Properties of loading a stranger's file: a real (tiny) checkpoint, mutated anywhere (config
values of every type and size, keys deleted and added at any depth, the sentencepiece models'
bytes, the tensors' names, shapes, dtypes and layouts), gives a working model or one
``CheckpointError`` line, never a traceback, a signal or the memory limit; and the explorer
answers any raw request (request line, headers, body) with a status line that is not 500, and
keeps serving.

Files are loaded in a child process under an address-space limit (``RLIMIT_AS``), one process
for many files. The default suite runs a few dozen examples a property; ``-m slow`` runs more.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import CONFIG_DIR, serving
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from nmt.checkpoint import checkpoint_bytes
from nmt.demo import Explorer, Limits
from nmt.model import MODEL_CLASSES, build_model
from nmt.translator import Translator
from nmt.vocab import Vocab

MEMORY_LIMIT = 3 << 30  # bytes of address space; an honest load of these files peaks under 1.5 GB
FAST, SLOW = 40, 200  # examples of each property in the default suite and with -m slow
SEARCH = {"beam_size": 2, "n_best": 1, "max_len_a": 1.0, "max_len_b": 5}  # decoding kept short whatever the file says

# Reads checkpoint paths from stdin, one a line, and answers each with one JSON line: a working
# model (it translated), a CheckpointError's message, or any other error's traceback.
LOADER = f"""
import json, resource, sys, traceback
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))
from nmt.errors import CheckpointError
from nmt.translator import Translator
for line in sys.stdin:
    try:
        translator = Translator.from_checkpoint(line.strip(), device="cpu", threads=1)
        result = {{"translated": translator.translate(["ana bel cor"], **{SEARCH!r})[0].text}}
    except CheckpointError as e:
        result = {{"refused": str(e)}}
    except Exception:
        result = {{"error": traceback.format_exc()}}
    print(json.dumps(result), flush=True)
"""

BASES = {  # name -> overrides of the train config: tiny models, with and without tied tensors
    "bahdanau": ["experiment=smoke"],
    "luong_tied": ["experiment=smoke", "model/decoder=luong", "model.decoder.output_dim=32", "model.tie_embeddings=true",
                   "model.share_embeddings=true", "data.vocab.joint=true", "model.decoder.num_layers=2",
                   "model.decoder.layer_norm=true"],  # fmt: skip
    "transformer": ["experiment=smoke_transformer", "model.decoder.positions=learned"],
}


class Bases(dict):
    """Base name -> payload, shown by name only in a failing example's report."""

    def __repr__(self) -> str:
        return f"Bases({', '.join(self)})"


@pytest.fixture(scope="module")
def bases(tiny_vocab: Vocab) -> Bases:
    """Each base checkpoint's payload, as ``torch.load`` reads it back."""
    payloads = Bases()
    for name, overrides in BASES.items():
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("train", overrides=overrides)
        torch.manual_seed(0)
        model = build_model(cfg.model, len(tiny_vocab), len(tiny_vocab))
        data = bytes(checkpoint_bytes(model, cfg, tiny_vocab, tiny_vocab))
        payloads[name] = torch.load(io.BytesIO(data), weights_only=True)
    return payloads


class Loader:
    """The :data:`LOADER` child process, started again after it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> None:
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: the child never blocks writing warnings
        self.proc = subprocess.Popen([sys.executable, "-c", LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def load(self, path: Path, timeout: float = 60) -> dict:
        """What loading ``path`` gave; a dead or stuck child is an ``{"died": ...}`` answer."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.close()
            return {"died": f"no answer in {timeout} s"}
        if line is None:
            code = self.proc.wait()
            self.stderr.seek(0)
            stderr = self.stderr.read().decode("utf-8", "replace")[-3000:]
            self.proc = None
            return {"died": f"exit status {code} (negative: the signal)", "stderr": stderr}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="module")
def loader() -> Iterator[Loader]:
    child = Loader()
    yield child
    child.close()


# --------------------------------------------------------------------------- mutations

_names = st.text(st.characters(codec="utf-8"), max_size=10)
_targets = st.sampled_from([t for role in MODEL_CLASSES.values() for t in role] + ["os.system", "nmt.files.Path"])
_numbers = (st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, 2, -1, 7, 35_000, 100_000, 2**31, 2**63 - 1])
            | st.floats())  # fmt: skip
_scalars = st.none() | st.booleans() | _numbers | _names | _targets | st.just("${oc.env:HOME}")
values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
                      max_leaves=6)  # fmt: skip
DTYPES = [torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8, torch.uint8, torch.bool,
          torch.complex64]  # fmt: skip


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path to a value under ``node`` (dict keys and list indices), containers included."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _at(node: Any, path: tuple) -> Any:
    for step in path:
        node = node[step]
    return node


def mutate_config(draw, config: dict) -> str:
    paths = list(_paths(config))[1:]
    numbers = [p for p in paths if type(_at(config, p)) in (int, float)]
    kind = draw(st.sampled_from(["set", "number", "delete", "add"]))
    kind = "add" if not paths else "set" if kind == "number" and not numbers else kind
    if kind == "number":
        path = draw(st.sampled_from(numbers))
        _at(config, path[:-1])[path[-1]] = draw(_numbers)
    elif kind == "set":
        path = draw(st.sampled_from(paths))
        _at(config, path[:-1])[path[-1]] = draw(values)
    elif kind == "delete":
        path = draw(st.sampled_from(paths))
        del _at(config, path[:-1])[path[-1]]
    else:
        path = draw(st.sampled_from([()] + [p for p in paths if isinstance(_at(config, p), dict)]))
        key = draw(_names | st.sampled_from(["num_layers", "hidden_dim", "_target_", "_args_", "_partial_", "beam"]))
        _at(config, path)[key] = draw(values)
    return f"config.{'.'.join(map(str, path))} {kind}"


def mutate_vocab(draw, vocab: dict) -> str:
    side = draw(st.sampled_from(["src", "tgt"]))
    blob = vocab[side]
    kind = draw(st.sampled_from(["truncate", "flip", "noise", "other", "pieces"]))
    if not isinstance(blob, bytes) or not blob:  # an earlier mutation left nothing to edit
        kind = "noise"
    if kind == "truncate":
        vocab[side] = blob[: draw(st.integers(0, len(blob)))]
    elif kind == "flip":
        at = draw(st.integers(0, len(blob) - 1))
        vocab[side] = blob[:at] + bytes([blob[at] ^ draw(st.integers(1, 255))]) + blob[at + 1 :]
    elif kind == "noise":
        vocab[side] = draw(st.binary(max_size=200))
    elif kind == "other":
        vocab[side] = draw(values)
    else:  # a valid model with more pieces than the embeddings have rows
        from sentencepiece import sentencepiece_model_pb2  # protobuf comes with tensorboard

        proto = sentencepiece_model_pb2.ModelProto()
        try:
            proto.ParseFromString(blob)
        except Exception:  # an earlier mutation broke it: nothing to extend
            return f"vocab.{side} {kind} (not a model)"
        for i in range(draw(st.integers(1, 3000))):
            proto.pieces.add(piece=f"\u2581extra{i}", score=-100.0 - i)
        vocab[side] = proto.SerializeToString()
    return f"vocab.{side} {kind}"


def mutate_weights(draw, weights: dict) -> str:
    name = draw(st.sampled_from(sorted(weights)))
    tensor = weights[name]
    kind = draw(st.sampled_from(["delete", "add", "shape", "dtype", "strided", "other"]))
    if not isinstance(tensor, torch.Tensor) or not tensor.is_contiguous():  # an earlier mutation: not copied here
        kind = kind if kind in ("delete", "add") else "other"
    if kind == "delete":
        del weights[name]
    elif kind == "add":  # the same tensor under a second name
        weights[draw(st.sampled_from([f"{name}.extra", f"{name}x", "decoder.rnn.weight_hh_l9"]))] = tensor
    elif kind == "shape":
        shape = draw(st.lists(st.integers(0, 70), max_size=4))
        weights[name] = torch.zeros(shape)
    elif kind == "dtype":
        weights[name] = tensor.to(draw(st.sampled_from(DTYPES)))
    elif kind == "strided":  # a view: transposed, or one element stretched over a huge shape
        huge = draw(st.booleans())
        weights[name] = tensor.reshape(-1)[:1].expand(10**6, 10**6) if huge else tensor.reshape(-1, 1).t()
    else:
        weights[name] = draw(values)
    return f"model[{name}] {kind}"


def mutate(draw, payload: dict) -> list[str]:
    done = []
    for _ in range(draw(st.integers(1, 3))):
        part = draw(st.sampled_from(["config", "config", "config", "vocab", "weights", "payload"]))
        if part == "config" and isinstance(payload.get("config"), dict):
            done.append(mutate_config(draw, payload["config"]))
        elif part == "vocab" and isinstance(payload.get("vocab"), dict) and {"src", "tgt"} <= payload["vocab"].keys():
            done.append(mutate_vocab(draw, payload["vocab"]))
        elif part == "weights" and isinstance(payload.get("model"), dict) and payload["model"]:
            done.append(mutate_weights(draw, payload["model"]))
        elif part == "payload":
            key = draw(st.sampled_from(["format", "version", "config", "vocab", "model", "train_state"]))
            payload[key] = draw(values)
            done.append(f"payload[{key}] set")
    return done


def _copy(payload: dict) -> dict:
    """A deep copy whose tensors are new (mutations may change them in place)."""
    return {**copy.deepcopy({k: v for k, v in payload.items() if k != "model"}),
            "model": {k: v.clone() for k, v in payload["model"].items()}}  # fmt: skip


def _check_loaded(loader: Loader, bases: dict, path: Path, data: st.DataObject) -> None:
    payload = _copy(bases[data.draw(st.sampled_from(sorted(bases)), label="base")])
    done = mutate(data.draw, payload)
    try:
        torch.save(payload, path)
    except Exception:  # e.g. a value torch.save cannot pickle: not a file anyone could hand over
        return
    result = loader.load(path)
    assert "died" not in result and "error" not in result, (done, result)
    if "refused" in result:
        message = result["refused"]
        assert message.startswith(f"{path}: ") and "\n" not in message and "Traceback" not in message, (done, message)
        event(f"refused: {' '.join(message.removeprefix(f'{path}: ').split()[:4])}")  # --hypothesis-show-statistics
    else:
        assert isinstance(result["translated"], str), (done, result)
        event("translated")


@settings(max_examples=FAST, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_mutated_checkpoint_loads_or_is_refused_in_one_line(loader: Loader, bases: dict, tmp_path: Path,
                                                                data: st.DataObject) -> None:  # fmt: skip
    _check_loaded(loader, bases, tmp_path / "mutated.pt", data)


@pytest.mark.slow
@settings(max_examples=SLOW, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_many_mutated_checkpoints_load_or_are_refused_in_one_line(loader: Loader, bases: dict, tmp_path: Path,
                                                                  data: st.DataObject) -> None:  # fmt: skip
    _check_loaded(loader, bases, tmp_path / "mutated.pt", data)


# ``python -m nmt.translate ARGS`` under the address-space limit
TRANSLATE = f"""
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))
sys.argv[0] = "nmt.translate"
runpy.run_module("nmt.translate", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_translate_answers_a_mutated_checkpoint_with_a_translation_or_one_line(bases: dict, tmp_path: Path,
                                                                               data: st.DataObject) -> None:  # fmt: skip
    """The command as a user runs it: exit status 0, or 2 with one error line; never a traceback."""
    payload = _copy(bases[data.draw(st.sampled_from(sorted(bases)), label="base")])
    done = mutate(data.draw, payload)
    path, src = tmp_path / "mutated.pt", tmp_path / "src.txt"
    try:
        torch.save(payload, path)
    except Exception:
        return
    src.write_text("ana bel cor\n", encoding="utf-8")
    args = [f"ckpt={path}", f"input={src}", "threads=1", *(f"{k}={v}" for k, v in SEARCH.items())]
    proc = subprocess.run([sys.executable, "-c", TRANSLATE, *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert "Traceback" not in proc.stderr, (done, proc.stderr[-3000:])
    assert (proc.returncode, len(errors)) in ((0, 0), (2, 1)), (done, proc.returncode, proc.stderr[-3000:])
    event(f"exit status {proc.returncode}")


# --------------------------------------------------------------------------- the explorer's raw requests


@pytest.fixture(scope="module")
def explorer(bases: dict, tmp_path_factory: pytest.TempPathFactory) -> Explorer:
    path = tmp_path_factory.mktemp("explorer") / "tiny.pt"
    torch.save(bases["bahdanau"], path)
    return Explorer({"tiny": Translator.from_checkpoint(path, device="cpu")}, Limits(max_chars=200, max_beam=4),
                    paths={"tiny": str(path)})  # fmt: skip


@pytest.fixture(scope="module")
def server(explorer: Explorer) -> Iterator[Any]:
    with serving(explorer, timeout=2.0) as httpd:
        yield httpd


def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw``, end the sending side (so a short body ends, rather than waits), read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before reading everything
            pass
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    return data


_header_text = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30)
_lengths = (st.integers(-5, 300).map(str) | st.sampled_from(["", "abc", "1e3", " 12 ", "+5", "0x10", "\u00b2", "9" * 40])
            | _header_text)  # fmt: skip
_bodies = st.binary(max_size=300) | st.sampled_from([b'{"text": "ana bel cor"}', b'{"text": "ana", "beam_size": 2}',
                                                     b"[]", b"{", b'{"text": "\\ud800"}'])  # fmt: skip


@st.composite
def raw_requests(draw, port: int) -> bytes:
    """A request line, headers and a body: a request the explorer serves, with a few of its parts
    replaced by odd ones (each part is usual nine times in ten)."""

    def mostly(usual: st.SearchStrategy, odd: st.SearchStrategy) -> Any:
        return draw(usual if draw(st.integers(0, 9)) else odd)

    body = draw(_bodies)
    odd_methods = st.sampled_from(["PUT", "HEAD", "OPTIONS", "BREW"]) | _header_text
    method = mostly(st.sampled_from(["POST"] * 3 + ["GET"]), odd_methods)
    paths = ["/api/translate"] * 6 + ["/api/models", "/", "/x?y", "*", "//", "/" + "a" * 70000]
    target = mostly(st.sampled_from(paths), _header_text)
    version = mostly(st.sampled_from(["HTTP/1.1", "HTTP/1.0"]), st.sampled_from(["HTTP/2.0", "HTTP/1", "", "http/1.1"]))
    line = mostly(st.just(f"{method} {target} {version}".rstrip()), _header_text)
    host = f"127.0.0.1:{port}"
    hosts = st.sampled_from([host, f"localhost:{port}"])
    fields = {"Host": mostly(hosts, st.sampled_from(["localhost", ""]) | _header_text),
              "Content-Type": mostly(st.just("application/json"), st.sampled_from(["text/plain", ""]) | _header_text),
              "Content-Length": mostly(st.just(str(len(body))), _lengths)}  # fmt: skip
    headers = [f"{name}: {value}" for name, value in fields.items() if draw(st.integers(0, 9))]  # some left out
    odd = {"Content-Length": _lengths, "Host": _header_text, "Origin": st.sampled_from([f"http://{host}", "null"]),
           "Transfer-Encoding": st.sampled_from(["chunked", "gzip"]), "Expect": st.just("100-continue"),
           "Connection": st.sampled_from(["close", "keep-alive"])}  # fmt: skip
    for name in draw(st.lists(st.sampled_from(sorted(odd)), max_size=2)):  # repeated or extra headers
        headers.insert(draw(st.integers(0, len(headers))), f"{name}: {draw(odd[name])}")
    headers += draw(st.lists(_header_text, max_size=1))  # a line that may not be a header at all
    head = "\r\n".join([line, *headers]).encode(draw(st.sampled_from(["latin-1", "utf-8"])), "replace")
    return head + b"\r\n\r\n" + body


STATUS = r"HTTP/1\.[01] (\d{3}) "


def _check_answer(server: Any, raw: bytes, caplog: pytest.LogCaptureFixture) -> None:
    port = server.server_address[1]
    caplog.clear()
    reply = exchange(port, raw)
    if reply or raw.split(b"\n", 1)[0].strip():  # a blank first line is no request: no answer is due
        match = re.match(STATUS.encode(), reply)
        assert match, ("no status line", raw[:300], reply[:300])
        status = int(match.group(1))
        event(f"status {status}")
        assert status // 100 in (2, 4, 5) and status != 500, (raw[:300], reply[:300])
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not problems, (raw[:300], problems)
    answer = exchange(port, f"GET /api/models HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.0 200 "), answer[:300]


@settings(max_examples=FAST, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@example(data=None)
@example(data=b"0\r\n\r\n")  # a request line that cannot be read: a status line all the same
@example(data=b"GET / HTTP/2.0\r\n\r\n")
def test_the_explorer_answers_any_raw_request_and_keeps_serving(server: Any, caplog: pytest.LogCaptureFixture,
                                                                data: st.DataObject | bytes | None) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="nmt.demo")
    port = server.server_address[1]
    if data is None:  # a request that translates: the property's happy path
        body = b'{"text": "ana bel cor"}'
        raw = (f"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip
    elif isinstance(data, bytes):
        raw = data
    else:
        raw = data.draw(raw_requests(port))
    _check_answer(server, raw, caplog)


@pytest.mark.slow
@settings(max_examples=SLOW, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_explorer_answers_many_raw_requests_and_keeps_serving(server: Any, caplog: pytest.LogCaptureFixture,
                                                                  data: st.DataObject) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="nmt.demo")
    _check_answer(server, data.draw(raw_requests(server.server_address[1])), caplog)
