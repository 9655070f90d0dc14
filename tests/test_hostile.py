"""The project attacked the way a stranger's file or a tired user would: crafted checkpoints,
commands run into a finished run's folder, outputs aimed at special files or at the inputs, and
inputs that are not plain files. Each attack gets one line and exit status 2 (or, where the input
is fine, the right result), and leaves everything it did not mean to touch as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import load_checkpoint, load_model, model_from_checkpoint
from nmt.errors import CheckpointError
from nmt.translator import Translator

CPU = torch.device("cpu")


def _run(module: str, args: list[str], cwd: Path, stdin: bytes = b"", timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, input=stdin, capture_output=True,
                          timeout=timeout)  # fmt: skip


def _one_line_refusal(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, one error line holding every needle; returns that line."""
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if " ERROR " in line or "][ERROR]" in line]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], err
    return errors[0]


# --------------------------------------------------------------------------- a checkpoint is data


def _write_text_node(target: Path) -> dict:
    """The issue's probe: Hydra would build the nested Path node first, then call write_text."""
    return {"_target_": "nmt.utils.Path.write_text", "_args_": [{"_target_": "nmt.utils.Path", "_args_": [str(target)]},
                                                                 "x\n"]}  # fmt: skip


def _with_model_node(payload: dict, role: str, key: str | None, value) -> dict:
    """A copy of ``payload`` whose ``config.model.<role>`` (or its ``key``) is ``value``."""
    config = {**payload["config"], "model": {**payload["config"]["model"]}}
    if key is None:
        config["model"][role] = value
    else:
        config["model"][role] = {**config["model"][role], key: value}
    return {**payload, "config": config}


CRAFTED = {
    # (role, key or None for the whole node, value as a function of the file it must not write)
    "nested_target_writes_a_file": ("encoder", "num_layers", _write_text_node),
    "nmt_function_as_target": ("encoder", None, lambda t: {"_target_": "nmt.utils.atomic_write_text",
                                                            "path": str(t), "text": "x"}),  # fmt: skip
    "foreign_target": ("attention", "_target_", lambda t: "os.system"),
    "hydra_args": ("decoder", "_args_", lambda t: [str(t)]),
    "partial": ("attention", "_partial_", lambda t: True),
    "list_value": ("encoder", "hidden_dim", lambda t: [16, str(t)]),
    "interpolation": ("encoder", "hidden_dim", lambda t: "${oc.env:HOME}"),
}


@pytest.mark.parametrize("attack", list(CRAFTED))
def test_a_crafted_checkpoint_config_is_refused_before_anything_runs(attack: str, smoke_run, tmp_path: Path) -> None:
    role, key, make = CRAFTED[attack]
    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), role, key, make(pwned)), evil)
    with pytest.raises(CheckpointError) as error:
        load_model(evil, CPU)
    assert str(evil) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(CheckpointError):
        Translator.from_checkpoint(evil, device="cpu")
    assert not pwned.exists()


def test_the_issue_probe_writes_nothing_through_any_command(smoke_run, tmp_path: Path) -> None:
    """translate, evaluate, the explorer and average all refuse the file in one line, exit 2."""
    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), "encoder", "num_layers", _write_text_node(pwned)),
               evil)  # fmt: skip
    src = tmp_path / "src.txt"
    src.write_text("toga sala\n", encoding="utf-8")
    commands = {
        "nmt.translate": [f"ckpt={evil}", f"input={src}", f"output={tmp_path / 'out.txt'}"],
        "nmt.evaluate": [f"ckpt=[evil:{evil}]", f"src={src}", f"ref={src}", f"out_dir={tmp_path / 'eval'}"],
        "nmt.demo": [f"ckpt={evil}", "port=0"],
    }
    for module, args in commands.items():
        _one_line_refusal(_run(module, args, tmp_path), str(evil))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.pt", "src.txt"], module
    assert not pwned.exists()


def test_loading_a_crafted_checkpoint_imports_nothing(smoke_run, tmp_path: Path) -> None:
    """A ``_target_`` naming a module of nmt that is not yet imported does not import it."""
    evil = tmp_path / "evil.pt"
    node = {"_target_": "nmt.demo.Explorer", "translators": {}, "limits": None}
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), "attention", None, node), evil)
    code = ("import sys\nfrom nmt.checkpoint import load_model\nfrom nmt.errors import CheckpointError\n"
            f"try:\n    load_model({str(evil)!r}, 'cpu')\nexcept CheckpointError as e:\n    print('refused', e)\n"
            "print('nmt.demo' in sys.modules)\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused") and "not one of nmt's attention classes" in proc.stdout
    assert proc.stdout.strip().endswith("False")


def test_an_honest_checkpoint_still_loads_and_old_configs_are_upgraded(smoke_run) -> None:
    payload = load_checkpoint(smoke_run.checkpoint)
    model, src_vocab, tgt_vocab, config = model_from_checkpoint(payload)
    assert model.num_parameters() > 0 and config.model.decoder._target_.startswith("nmt.decoder.")
    old = {**payload, "config": {**payload["config"], "data": {**payload["config"]["data"]}}}
    old["config"]["data"]["name"] = old["config"]["data"].pop("kind")  # the key's name before data=hf
    path = smoke_run.folder / "old-style.pt"
    torch.save(old, path)
    try:
        assert load_model(path, CPU)[3].data.kind == payload["config"]["data"]["kind"]
    finally:
        path.unlink()


MISSING_PARTS = {
    "no_train_section": (lambda p: {**p, "config": {k: v for k, v in p["config"].items() if k != "train"}},
                         "no train section"),  # fmt: skip
    "no_search": (lambda p: {**p, "config": {**p["config"], "train": {"seed": 1}}}, "no train.search section"),
    "vocab_not_bytes": (lambda p: {**p, "vocab": {"src": "x", "tgt": "y"}}, "sentencepiece models"),
    "weights_not_tensors": (lambda p: {**p, "model": {"encoder.embedding.weight": [1, 2]}}, "state dict of tensors"),
}


@pytest.mark.parametrize("kind", list(MISSING_PARTS))
def test_a_checkpoint_missing_a_part_is_one_line(kind: str, smoke_run, tmp_path: Path) -> None:
    change, message = MISSING_PARTS[kind]
    path = tmp_path / "odd.pt"
    torch.save(change(load_checkpoint(smoke_run.checkpoint)), path)
    with pytest.raises(CheckpointError, match=message) as error:
        load_model(path, CPU)
    assert str(path) in str(error.value)
    src = tmp_path / "src.txt"
    src.write_text("toga\n", encoding="utf-8")
    _one_line_refusal(_run("nmt.translate", [f"ckpt={path}", f"input={src}"], tmp_path), message)
    _one_line_refusal(_run("nmt.evaluate", [f"ckpt={path}", f"src={src}", f"ref={src}", f"out_dir={tmp_path / 'e'}"],
                           tmp_path), message)  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["odd.pt", "src.txt"]  # no output, no eval folder
