"""Checkpoints: one self-describing file per save, and the only code that reads or writes them.

A checkpoint holds the resolved config, both sentencepiece models, the weights of the plain
(unwrapped, uncompiled) model, the training state for resuming (optimizer, scheduler, random
state, position in the data; None in weights-only files) and its provenance (package versions,
git commit). :func:`load_model` rebuilds a translator from the file alone.

A checkpoint is data, never code: it is read with ``torch.load(weights_only=True)`` (tensors,
numbers, strings, bytes and containers only), its config must be plain values (no ``${...}``
interpolation), and its model is built by :func:`nmt.model.build_model`, which calls only the
classes of :data:`nmt.model.MODEL_CLASSES`. Nothing a file says is imported, called or written,
and no path or address named inside it is read.

A file's work is bounded by its own weights: the model its config declares is first built on
PyTorch's ``meta`` device (shapes without memory), with no more tensors than the file holds, and
every parameter and buffer is compared with the stored one (name, shape, dtype) before any
memory is allocated; the stored tensors then become the model's (``load_state_dict(assign=True)``).
A config that declares more than its weights (``hidden_dim: 35000`` beside 64-unit weights,
100000 layers) is refused in one line. Files are written atomically.
"""

from __future__ import annotations

import copy
import functools
import io
import logging
import re
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from nmt.errors import CheckpointError, ConfigError
from nmt.files import atomic_write_bytes, check_output, write_output
from nmt.model import Seq2Seq, build_model
from nmt.runtime import provenance
from nmt.search import SearchSettings, check_search_settings
from nmt.vocab import Vocab
from nmt.weights import assign, check_fits, declare

log = logging.getLogger("nmt.checkpoint")

CHECKPOINT_FORMAT = "nmt-checkpoint"
CHECKPOINT_VERSION = 1
MAX_DEPTH = 32  # nesting of a config or training state (nmt writes fewer than 8 levels)
MAX_WEIGHTS = 4096  # tensors in a state dict (a 24 + 24 layer Transformer has about 1000)


def checkpoint_bytes(
    model: nn.Module,
    config: DictConfig | dict,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    train_state: dict[str, Any] | None = None,
) -> memoryview:
    """A self-describing checkpoint, serialized in memory.

    :param model: the plain ``Seq2Seq`` (not a DDP or compiled wrapper).
    :param train_state: optimizer, scheduler, step, RNG... for resuming; omitted for inference-only files.
    """
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": config,
        "model": model.state_dict(),
        "vocab": {"src": src_vocab.model_proto, "tgt": tgt_vocab.model_proto},
        "train_state": train_state,
        "provenance": provenance(),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getbuffer()


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    config: DictConfig | dict,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    train_state: dict[str, Any] | None = None,
    write: Callable[[Path, bytes], None] = atomic_write_bytes,
) -> None:
    """Write a self-describing checkpoint (:func:`checkpoint_bytes`) atomically (temporary file,
    fsync, rename).

    The file is serialized in memory first: ``torch.save`` into a file that cannot be written
    reports e.g. a full disk as an opaque ``unexpected pos`` error, a plain write as ``ENOSPC``.

    :param write: how the bytes reach ``path``; :func:`nmt.files.write_output` for a file a user named.
    :raise CheckpointError: when the file cannot be written; an older file at ``path`` is then intact.
    """
    data = checkpoint_bytes(model, config, src_vocab, tgt_vocab, train_state)
    path = Path(path)
    try:
        write(path, data)
    except OSError as e:
        kept = f"the previous {path.name} is intact" if path.is_file() else f"no {path.name} was written"
        raise CheckpointError(f"cannot write the checkpoint {path} ({e.strerror or e}); {kept}") from e


def checkpoint_file(path: str | Path) -> Path:
    """The checkpoint file a command was given: a file as it is, and for a run folder (one holding
    ``checkpoints/best.pt``) that run's best checkpoint, said once in the log."""
    path = Path(path)
    best = path / "checkpoints" / "best.pt"
    if path.is_dir() and best.is_file():
        _say_run_folder(str(path), str(best))
        return best
    return path


@functools.cache
def _say_run_folder(folder: str, best: str) -> None:
    log.info("%s is a run folder: using its best checkpoint, %s", folder, best)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and check a checkpoint (:func:`check_payload`, and :func:`check_weights`: the weights
    fit the model its config declares); every failure is one :class:`CheckpointError` naming the file.

    :param path: the file, or a run folder (its ``checkpoints/best.pt``, :func:`checkpoint_file`).
    """
    path = checkpoint_file(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, and not a run folder (it holds no checkpoints/best.pt); give a "
                              "checkpoint file")  # fmt: skip
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # on arbitrary bytes the unpickler raises anything: KeyError, IndexError...
        raise CheckpointError(f"{path}: not a readable checkpoint: {_unreadable(path, e)}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no '{CHECKPOINT_FORMAT}' format tag)")
    if payload.get("version") != CHECKPOINT_VERSION:
        version = repr(payload.get("version"))
        raise CheckpointError(
            f"{path}: checkpoint version {version if len(version) < 40 else version[:40] + '...'} is not supported "
            f"by this nmt (which reads version {CHECKPOINT_VERSION})"
        )
    try:
        check_payload(payload)
        upgrade_config(payload["config"])
        check_weights(payload)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {one_line(e)}") from None
    return payload


def one_line(error: Exception, limit: int = 600) -> str:
    """An error's message on one line and at most ``limit`` characters (a crafted file's key names
    and values may hold line breaks, or be long)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load`` could not read ``path``, in nmt's words: PyTorch's own message would
    suggest loading with ``weights_only=False``, which runs whatever code the file holds."""
    if not zipfile.is_zipfile(path):
        return "the file is not an nmt checkpoint (nmt writes zip archives; this is text, or another format)"
    if "weights only load failed" in str(error).lower():
        return ("the file is not an nmt checkpoint: it holds Python objects besides tensors and plain data, "
                "which nmt never loads")
    return "the file is not an nmt checkpoint, or a truncated or damaged one"


def check_payload(payload: dict[str, Any]) -> None:
    """Refuse a checkpoint whose parts are not what nmt writes: a config of plain values with the
    ``model``, ``data`` and ``train.search`` sections (the decoding settings complete and valid,
    the languages and ``data.max_len`` that the commands read), two sentencepiece models as
    bytes, and a state dict of at most :data:`MAX_WEIGHTS` tensors. Every tensor (weights and
    training state) is a dense one whose elements are in the file (no stride tricks that give a
    few stored bytes a huge shape).

    :raise CheckpointError: one line saying which part is wrong.
    """
    config = payload.get("config")
    if not isinstance(config, dict):
        raise CheckpointError("the checkpoint holds no config; was it written by nmt?")
    for section in ("model", "data", "train"):
        if not isinstance(config.get(section), dict):
            raise CheckpointError(f"the checkpoint's config has no {section} section; was it written by nmt?")
    if not isinstance(config["train"].get("search"), dict):
        raise CheckpointError("the checkpoint's config has no train.search section; was it written by nmt?")
    _check_plain(config, "config", 0)
    _check_search(config["train"]["search"])
    _check_data(config["data"])
    vocab = payload.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(vocab.get(side), bytes) for side in ("src", "tgt")):
        raise CheckpointError("the checkpoint holds no source and target sentencepiece models")
    weights = payload.get("model")
    if not isinstance(weights, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in weights.items()):  # fmt: skip
        raise CheckpointError("the checkpoint's model entry is not a state dict of tensors")
    if len(weights) > MAX_WEIGHTS:
        raise CheckpointError(f"the checkpoint's state dict holds {len(weights)} tensors, more than any nmt model "
                              f"(at most {MAX_WEIGHTS})")  # fmt: skip
    _check_tensors(weights, "model", 0)
    _check_tensors(payload.get("train_state"), "train_state", 0)


def _check_plain(node: Any, where: str, depth: int) -> None:
    """Plain config data: mappings with string keys, lists, numbers, strings, booleans, null; and
    no string that OmegaConf would read as an interpolation (``${...}`` resolves environment
    variables and other keys when the config is used)."""
    if depth > MAX_DEPTH:
        raise CheckpointError(f"{where}: nested deeper than {MAX_DEPTH} levels; not a config nmt writes")
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise CheckpointError(f"{where}: a key {key!r} that is not a string")
            _check_plain(value, f"{where}.{key}", depth + 1)
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            _check_plain(value, f"{where}[{i}]", depth + 1)
    elif isinstance(node, str):
        if "${" in node:
            raise CheckpointError(f"{where}={node!r}: an interpolation; a checkpoint's config holds resolved values")
    elif not isinstance(node, bool | int | float | type(None)):
        raise CheckpointError(f"{where}: a {type(node).__name__}, not a plain config value")


def _check_search(search: dict[str, Any]) -> None:
    """``train.search``: exactly the keys of :class:`~nmt.search.SearchSettings`, with values that
    :func:`~nmt.search.check_search_settings` accepts (what every command decodes with by default)."""
    names = [f.name for f in fields(SearchSettings)]
    problems = [f"train.search.{name} is missing" for name in names if name not in search]
    problems += [f"train.search.{key} is not a decoding setting" for key in search if key not in names]
    if problems:
        raise CheckpointError(f"the checkpoint's config: {'; '.join(problems)}")
    try:
        check_search_settings(search["beam_size"], search["n_best"], search["length_penalty"], search["alpha"],
                              search["max_len_a"], search["max_len_b"], prefix="train.search.")  # fmt: skip
    except ValueError as e:
        raise CheckpointError(f"the checkpoint's config: {e}") from None


def _check_data(data: dict[str, Any]) -> None:
    """The data settings every command reads: the languages (labels) and the source length limit."""
    for key in ("src_lang", "tgt_lang"):
        if not isinstance(data.get(key), str):
            raise CheckpointError(f"the checkpoint's config: data.{key}={data.get(key)!r} must be a language name")
    max_len = data.get("max_len")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise CheckpointError(f"the checkpoint's config: data.max_len={max_len!r} must be an integer >= 1")


def _check_tensors(node: Any, where: str, depth: int) -> None:
    """Every tensor under ``node`` is dense, off the meta device and contiguous, so its shape is
    backed by elements stored in the file."""
    if depth > MAX_DEPTH:
        raise CheckpointError(f"{where}: nested deeper than {MAX_DEPTH} levels; not written by nmt")
    if isinstance(node, torch.Tensor):
        if node.layout != torch.strided or node.is_meta or not node.is_contiguous():
            raise CheckpointError(f"{where}: a tensor of shape {tuple(node.shape)} whose elements are not stored in the "
                                  "file (sparse, meta or strided over fewer elements); not written by nmt")  # fmt: skip
    elif isinstance(node, Mapping):
        for key, value in node.items():
            _check_tensors(value, f"{where}.{key}", depth + 1)
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            _check_tensors(value, f"{where}[{i}]", depth + 1)


def direction(config: Mapping[str, Any]) -> str:
    """``src_lang->tgt_lang`` of a checkpoint's config (its ``data`` labels)."""
    data = config["data"]
    return f"{data['src_lang']}->{data['tgt_lang']}"


# Data keys added after checkpoints were first written, with the values that reproduce what those
# checkpoints' runs did (so that they resume and evaluate as before).
ADDED_DATA_KEYS = {"max_train_pairs": None, "num_proc": 1, "text_form": "as_is",
                   "extra_train": {"pairs": None, "pairs_langs": None, "src": None, "tgt": None, "repeat": 1}}  # fmt: skip
ADDED_VOCAB_KEYS = {"sample_size": 2_000_000}
ADDED_TRAIN_KEYS = {"guided_alignment": {"path": None, "weight": 0.1, "decay": 1.0, "layer": None, "heads": None,
                                         "full_context": False},
                    "init_from": None}  # fmt: skip
ADDED_SAMPLING_KEYS = {"alpha": 0.0, "nbest_size": -1, "max_growth": 1.5}  # data.subword_sampling: off
MOVED_TARGETS = {"nmt.schedule.WarmupInverseSqrt": "nmt.training.schedule.WarmupInverseSqrt"}


def upgrade_config(config: dict[str, Any]) -> dict[str, Any]:
    """Bring a checkpoint's config (a plain dict) to today's keys, in place: ``data.name`` became
    ``data.kind`` when ``data=hf`` took ``data.name`` for the dataset's config; keys added since get
    the values the run used; a schedule class that moved gets its new name."""
    scheduler = config.get("train", {}).get("scheduler")
    target = scheduler.get("_target_") if isinstance(scheduler, dict) else None
    if isinstance(target, str) and target in MOVED_TARGETS:  # modules grouped in subpackages
        scheduler["_target_"] = MOVED_TARGETS[target]
    data = config.get("data")
    if isinstance(data, dict) and "kind" not in data and data.get("name") in ("multi30k", "files", "synthetic"):
        data["kind"] = data.pop("name")
        for key, default in ADDED_DATA_KEYS.items():
            data.setdefault(key, copy.deepcopy(default))
        if isinstance(data.get("vocab"), dict):
            for key, default in ADDED_VOCAB_KEYS.items():
                data["vocab"].setdefault(key, default)
    if isinstance(data, dict) and isinstance(data.get("vocab"), dict):  # a training run's data (not a bare test's)
        for key, default in ADDED_DATA_KEYS.items():
            data.setdefault(key, copy.deepcopy(default))
        if isinstance(data.get("extra_train"), dict):  # keys added to data.extra_train since (repeat)
            for key, default in ADDED_DATA_KEYS["extra_train"].items():
                data["extra_train"].setdefault(key, default)
        sampling = data.setdefault("subword_sampling", {})
        if isinstance(sampling, dict):
            for key, default in ADDED_SAMPLING_KEYS.items():
                sampling.setdefault(key, default)
    train = config.get("train")
    if isinstance(train, dict) and "optimizer" in train:  # a training config (not a bare test's)
        for key, default in ADDED_TRAIN_KEYS.items():
            train.setdefault(key, copy.deepcopy(default))
        if isinstance(train["guided_alignment"], dict):  # keys added to train.guided_alignment since (full_context)
            for key, default in ADDED_TRAIN_KEYS["guided_alignment"].items():
                train["guided_alignment"].setdefault(key, default)
    return config


def model_from_checkpoint(payload: dict[str, Any]) -> tuple[Seq2Seq, Vocab, Vocab, DictConfig]:
    """Rebuild the model, vocabularies and config of a loaded checkpoint (model in eval mode, on
    the CPU, its tensors those of ``payload``).

    The model is declared on the meta device and compared with the weights before the stored
    tensors are assigned to it (:mod:`nmt.weights`): no memory is allocated for a size the file
    does not hold.

    :raise CheckpointError: one line for anything that stops the rebuild (e.g. a config written by
        another version of nmt, or weights of another shape).
    """
    try:
        check_payload(payload)
        model, src_vocab, tgt_vocab, config = _declared_model(payload)
        check_fits(model, payload["model"], "checkpoint weights")
        assign(model, payload["model"])
    except CheckpointError as e:
        raise CheckpointError(one_line(e)) from None
    return model.eval(), src_vocab, tgt_vocab, config


def check_weights(payload: dict[str, Any]) -> None:
    """Check, without allocating the model, that the weights of ``payload`` (and the trained
    weights its training state keeps beside an average) are those of the model its config declares.

    :raise CheckpointError: one line naming what does not fit.
    """
    model, *_ = _declared_model(payload)
    check_fits(model, payload["model"], "checkpoint weights")
    state = payload.get("train_state")
    trained = state.get("trained_model") if isinstance(state, dict) else None
    if trained is not None:
        if not isinstance(trained, dict) or not all(isinstance(t, torch.Tensor) for t in trained.values()):
            raise CheckpointError("the training state's trained_model is not a state dict of tensors")
        check_fits(model, trained, "the training state's trained weights")


def _declared_model(payload: dict[str, Any]) -> tuple[Seq2Seq, Vocab, Vocab, DictConfig]:
    """The model the config declares, on the meta device (:func:`nmt.weights.declare`), with
    the vocabularies (their sizes are the embeddings') and the config."""
    try:
        config = OmegaConf.create(payload["config"])
        src_vocab, tgt_vocab = Vocab(payload["vocab"]["src"]), Vocab(payload["vocab"]["tgt"])
        sizes = len(src_vocab), len(tgt_vocab)
        model = declare(lambda: build_model(payload["config"]["model"], *sizes), len(payload["model"]))  # nmt's classes
    except CheckpointError:
        raise
    except ConfigError as e:
        raise CheckpointError(f"the config stored in the checkpoint cannot build a model: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, OmegaConfBaseException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(
            f"cannot rebuild the model from the config stored in the checkpoint ({type(e).__name__}: {first}); "
            "was it written by another version of nmt?"
        ) from None
    return model, src_vocab, tgt_vocab, config


def load_model(path: str | Path, device: torch.device) -> tuple[Seq2Seq, Vocab, Vocab, DictConfig]:
    """Model (eval mode, on ``device``), source and target vocabularies and config of a checkpoint file.

    :param path: the file, or a run folder (its ``checkpoints/best.pt``).
    :raise CheckpointError: for any checkpoint that cannot be used, one line naming the file.
    """
    path = checkpoint_file(path)
    payload = load_checkpoint(path, map_location="cpu")  # weights_only=True: runs no code
    try:
        model, src_vocab, tgt_vocab, config = model_from_checkpoint(payload)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    return model.to(device), src_vocab, tgt_vocab, config


def run_checkpoints(run: Path, last: int) -> list[Path]:
    """The ``last`` periodic checkpoints (``step*.pt``) of a run folder (or its ``checkpoints/``), by step."""
    if last < 1:
        raise CheckpointError(f"--last {last}: must be at least 1")
    folder = run / "checkpoints" if (run / "checkpoints").is_dir() else run
    found = [(int(m.group(1)), p) for p in folder.glob("step*.pt") if (m := re.fullmatch(r"step(\d+)\.pt", p.name))]
    if not found:
        raise CheckpointError(f"{folder}: no step*.pt checkpoints (train with train.keep_checkpoints > 0)")
    return [path for _, path in sorted(found)[-last:]]


def check_average_output(paths: list[Path], output: Path) -> None:
    """Before averaging: ``output`` is none of ``paths``, can be written (:func:`nmt.files.check_output`),
    and is not a checkpoint that a run resumes from (its training state would be lost).

    :raise ConfigError: naming ``--output`` and what to do.
    """
    check_output(output, "--output", inputs=paths)
    if output.is_file():
        try:
            resumable = torch.load(output, map_location="cpu", weights_only=True).get("train_state") is not None
        except Exception:  # not a checkpoint (any unpickling error): replacing it is the user's choice
            resumable = False
        if resumable:
            raise ConfigError(
                f"--output {output} holds a training state (train.resume=auto continues from it) that the average "
                "would replace; write the average elsewhere, e.g. RUN/checkpoints/averaged.pt"
            )


def average_checkpoints(paths: list[Path], output: Path) -> None:
    """Write the element-wise mean of the weights of ``paths`` (in float64, then cast back) as a
    weights-only checkpoint with the last one's config and vocabularies.

    :raise ConfigError: for an ``output`` that :func:`check_average_output` refuses, before any is read.
    :raise CheckpointError: for checkpoints of other model configs, vocabularies or directions
        (a joint vocabulary lets a de->en and an en->de model share everything else).
    """
    check_average_output(paths, output)
    payloads = [load_checkpoint(path) for path in paths]
    first = payloads[0]
    for path, payload in zip(paths[1:], payloads[1:]):
        if payload["config"]["model"] != first["config"]["model"] or payload["vocab"] != first["vocab"]:
            raise CheckpointError(f"{path}: another model config or vocabulary than {paths[0]}; cannot average")
        if direction(payload["config"]) != direction(first["config"]):
            raise CheckpointError(f"{path} translates {direction(payload['config'])} and {paths[0]} "
                                  f"{direction(first['config'])}: cannot average checkpoints of two directions")  # fmt: skip
    averaged = {}
    for name, tensor in first["model"].items():
        if tensor.is_floating_point():
            total = sum(payload["model"][name].double() for payload in payloads)
            averaged[name] = (total / len(payloads)).to(tensor.dtype)
        else:  # integer buffers (none in the current models): they must agree
            if any(not torch.equal(payload["model"][name], tensor) for payload in payloads):
                raise CheckpointError(f"non-float tensor {name} differs between the checkpoints; cannot average")
            averaged[name] = tensor
    try:
        model, src_vocab, tgt_vocab, config = model_from_checkpoint({**payloads[-1], "model": averaged})
    except CheckpointError as e:
        raise CheckpointError(f"{paths[-1]}: {e}") from None
    save_checkpoint(output, model, config, src_vocab, tgt_vocab, train_state=None, write=write_output)
