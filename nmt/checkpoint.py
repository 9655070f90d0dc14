"""Checkpoints: one self-describing file per save, and the only code that reads or writes them.

A checkpoint holds the resolved config, both sentencepiece models, the weights of the plain
(unwrapped, uncompiled) model, the training state for resuming (optimizer, scheduler, random
state, position in the data; None in weights-only files) and its provenance (package versions,
git commit). :func:`load_model` rebuilds a translator from the file alone.

A checkpoint is data, never code: it is read with ``torch.load(weights_only=True)`` (tensors,
numbers, strings, bytes and containers only), its config must be plain values (no ``${...}``
interpolation), and its model is built by :func:`nmt.model.build_model`, which calls only the
classes of :data:`nmt.model.MODEL_CLASSES`. Nothing a file says is imported, called or written.
Files are written atomically.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
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
from nmt.vocab import Vocab

CHECKPOINT_FORMAT = "nmt-checkpoint"
CHECKPOINT_VERSION = 1


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


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and check a checkpoint; every failure is one :class:`CheckpointError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # on arbitrary bytes the unpickler raises anything: KeyError, IndexError...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated, corrupt, or not written by nmt): {first}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no '{CHECKPOINT_FORMAT}' format tag)")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {payload.get('version')} is not supported by this nmt "
            f"(which reads version {CHECKPOINT_VERSION})"
        )
    try:
        check_payload(payload)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    upgrade_config(payload["config"])
    return payload


def check_payload(payload: dict[str, Any]) -> None:
    """Refuse a checkpoint whose parts are not what nmt writes: a config of plain values with the
    ``model``, ``data`` and ``train.search`` sections, two sentencepiece models as bytes, and a
    state dict of tensors.

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
    _check_plain(config, "config")
    vocab = payload.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(vocab.get(side), bytes) for side in ("src", "tgt")):
        raise CheckpointError("the checkpoint holds no source and target sentencepiece models")
    weights = payload.get("model")
    if not isinstance(weights, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in weights.items()):  # fmt: skip
        raise CheckpointError("the checkpoint's model entry is not a state dict of tensors")


def _check_plain(node: Any, where: str) -> None:
    """Plain config data: mappings with string keys, lists, numbers, strings, booleans, null; and
    no string that OmegaConf would read as an interpolation (``${...}`` resolves environment
    variables and other keys when the config is used)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise CheckpointError(f"{where}: a key {key!r} that is not a string")
            _check_plain(value, f"{where}.{key}")
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            _check_plain(value, f"{where}[{i}]")
    elif isinstance(node, str):
        if "${" in node:
            raise CheckpointError(f"{where}={node!r}: an interpolation; a checkpoint's config holds resolved values")
    elif not isinstance(node, bool | int | float | type(None)):
        raise CheckpointError(f"{where}: a {type(node).__name__}, not a plain config value")


# Data keys added after checkpoints were first written, with the values that reproduce what those
# checkpoints' runs did (so that they resume and evaluate as before).
ADDED_DATA_KEYS = {"max_train_pairs": None, "num_proc": 1}
ADDED_VOCAB_KEYS = {"sample_size": 2_000_000}
MOVED_TARGETS = {"nmt.schedule.WarmupInverseSqrt": "nmt.training.schedule.WarmupInverseSqrt"}


def upgrade_config(config: dict[str, Any]) -> dict[str, Any]:
    """Bring a checkpoint's config (a plain dict) to today's keys, in place: ``data.name`` became
    ``data.kind`` when ``data=hf`` took ``data.name`` for the dataset's config; keys added since get
    the values the run used; a schedule class that moved gets its new name."""
    scheduler = config.get("train", {}).get("scheduler")
    if isinstance(scheduler, dict) and scheduler.get("_target_") in MOVED_TARGETS:  # modules grouped in subpackages
        scheduler["_target_"] = MOVED_TARGETS[scheduler["_target_"]]
    data = config.get("data")
    if isinstance(data, dict) and "kind" not in data and data.get("name") in ("multi30k", "files", "synthetic"):
        data["kind"] = data.pop("name")
        for key, default in ADDED_DATA_KEYS.items():
            data.setdefault(key, default)
        if isinstance(data.get("vocab"), dict):
            for key, default in ADDED_VOCAB_KEYS.items():
                data["vocab"].setdefault(key, default)
    return config


def model_from_checkpoint(payload: dict[str, Any]) -> tuple[Seq2Seq, Vocab, Vocab, DictConfig]:
    """Rebuild the model, vocabularies and config of a loaded checkpoint (model in eval mode).

    :raise CheckpointError: one line for anything that stops the rebuild (e.g. a config written by
        another version of nmt, or weights of another shape).
    """
    check_payload(payload)
    try:
        config = OmegaConf.create(payload["config"])
        src_vocab, tgt_vocab = Vocab(payload["vocab"]["src"]), Vocab(payload["vocab"]["tgt"])
        model = build_model(payload["config"]["model"], len(src_vocab), len(tgt_vocab))  # only nmt's classes
    except ConfigError as e:
        raise CheckpointError(f"the config stored in the checkpoint cannot build a model: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, OmegaConfBaseException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(
            f"cannot rebuild the model from the config stored in the checkpoint ({type(e).__name__}: {first}); "
            "was it written by another version of nmt?"
        ) from None
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as e:
        message = " ".join(str(e).split())  # one line, even for torch's list of missing keys
        message = message if len(message) < 400 else message[:400] + " ..."
        raise CheckpointError(f"checkpoint weights do not fit the model its config describes: {message}") from None
    return model.eval(), src_vocab, tgt_vocab, config


def load_model(path: str | Path, device: torch.device) -> tuple[Seq2Seq, Vocab, Vocab, DictConfig]:
    """Model (eval mode, on ``device``), source and target vocabularies and config of a checkpoint file.

    :raise CheckpointError: for any checkpoint that cannot be used, one line naming the file.
    """
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
    """
    check_average_output(paths, output)
    payloads = [load_checkpoint(path) for path in paths]
    first = payloads[0]
    for path, payload in zip(paths[1:], payloads[1:]):
        if payload["config"]["model"] != first["config"]["model"] or payload["vocab"] != first["vocab"]:
            raise CheckpointError(f"{path}: another model config or vocabulary than {paths[0]}; cannot average")
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
