"""``nmt.align``: Pharaoh links within the words of each pair, one per target word with argmax;
the translate-then-align mode; soft weights; AER against gold links (0 against the model's own
links), with the symmetrised directions nested as they must be, and every method scored with and
without ``align.eos_unaligned``; bad input, and a reverse model that does not translate the other
way, refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SmokeRun
from omegaconf import OmegaConf

from nmt.align import EOS_UNALIGNED, _report, extract_links
from nmt.checkpoint import load_checkpoint
from nmt.evaluation.word_alignment import SYMMETRIZATIONS, GoldAlignment, parse_pharaoh


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _align(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt.align", *args, "threads=1"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.fixture
def pair_files(smoke_run: SmokeRun, tmp_path: Path) -> tuple[Path, Path]:
    return _write(tmp_path / "src.txt", smoke_run.test_src), _write(tmp_path / "tgt.txt", smoke_run.test_tgt)


def _labelled(smoke_run: SmokeRun, path: Path, src_lang: str, tgt_lang: str) -> Path:
    """The smoke checkpoint with other language labels (``tgt``, ``src``: a stand-in for a reverse model)."""
    payload = load_checkpoint(smoke_run.checkpoint)
    payload["config"]["data"]["src_lang"], payload["config"]["data"]["tgt_lang"] = src_lang, tgt_lang
    torch.save(payload, path)
    return path


@pytest.mark.slow
def test_links_lie_within_each_pair(smoke_run: SmokeRun, pair_files, tmp_path: Path) -> None:
    src, tgt = pair_files
    out = tmp_path / "links.txt"
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", f"output={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(smoke_run.test_src)
    for line, source, target in zip(lines, smoke_run.test_src, smoke_run.test_tgt):
        links = parse_pharaoh(line).sure
        assert all(0 <= i < len(source.split()) and 0 <= j < len(target.split()) for i, j in links)
        assert sorted(j for _, j in links) == list(range(len(target.split())))  # argmax: one link a target word
    # the same pairs as one 'source ||| target' file give the same links
    pairs = _write(tmp_path / "pairs.txt", [f"{s} ||| {t}" for s, t in zip(smoke_run.test_src, smoke_run.test_tgt)])
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"pairs={pairs}")
    assert proc.returncode == 0 and proc.stdout.splitlines() == lines, proc.stderr[-2000:]


@pytest.mark.slow
def test_translations_are_aligned_when_no_target_is_given(smoke_run: SmokeRun, pair_files, tmp_path: Path) -> None:
    src, _ = pair_files
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"src={src}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    translate = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={src}",
                                "threads=1"], capture_output=True, text=True, timeout=300)  # fmt: skip
    rows = [line.split(" ||| ") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == translate.stdout.splitlines()
    assert all(len(parse_pharaoh(r[1]).sure) == len(r[0].split()) for r in rows)
    # nmt.translate appends the same alignments, to the 1-best and to every n-best line
    appended = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={src}",
                               "alignments=true", "threads=1"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert appended.returncode == 0 and appended.stdout == proc.stdout, appended.stderr[-2000:]
    nbest = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={src}",
                            "alignments=true", "n_best=2", "beam_size=2", "threads=1"], capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    fields = [line.split("\t") for line in nbest.stdout.splitlines()]
    assert nbest.returncode == 0 and len(fields) == 2 * len(rows), nbest.stderr[-2000:]
    assert all(len(parse_pharaoh(f[2].split(" ||| ")[1]).sure) == len(f[2].split(" ||| ")[0].split()) for f in fields)


@pytest.mark.slow
def test_soft_weights(smoke_run: SmokeRun, pair_files) -> None:
    src, tgt = pair_files
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", "format=soft")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for record, source, target in zip(map(json.loads, proc.stdout.splitlines()), smoke_run.test_src, smoke_run.test_tgt):
        weights = record["weights"]
        assert len(weights) == len(target.split()) and all(len(row) == len(source.split()) for row in weights)
        assert all(0 <= sum(row) <= 1.0001 for row in weights)  # the </s> column is left out


@pytest.mark.slow
def test_aer_against_gold_links(smoke_run: SmokeRun, pair_files, tmp_path: Path) -> None:
    src, tgt = pair_files
    own = tmp_path / "own.txt"
    assert _align(f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", f"output={own}").returncode == 0
    report = tmp_path / "aer.json"
    reverse = _labelled(smoke_run, tmp_path / "reverse.pt", "tgt", "src")
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", f"gold={own}", f"report={report}",
                  f"reverse_ckpt={reverse}", f"output={tmp_path / 'sym.txt'}", "align.eos_unaligned=true")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    written_report = json.loads(report.read_text(encoding="utf-8"))
    scores = written_report["scores"]
    assert written_report["eos_unaligned"] is True
    assert scores["forward"] == {"aer": 0.0, "precision": 1.0, "recall": 1.0, "links": scores["forward"]["links"]}
    methods = ("forward", "backward", "intersection", "union", "grow_diag", "grow_diag_final")
    assert list(scores) == [*(m + suffix for m in methods for suffix in ("", EOS_UNALIGNED)), "diagonal"]
    # a word left unaligned loses its link, and the gold are the links kept without the option
    assert scores["forward" + EOS_UNALIGNED]["precision"] == 1.0
    assert scores["forward" + EOS_UNALIGNED]["links"] <= scores["forward"]["links"]
    counts = [scores[m]["links"] for m in ("intersection", "grow_diag", "grow_diag_final", "union")]
    assert counts == sorted(counts)
    assert scores["union"]["recall"] == 1.0 and scores["intersection"]["precision"] == 1.0
    assert "AER" in proc.stderr and "diagonal" in proc.stderr
    written = (tmp_path / "sym.txt").read_text(encoding="utf-8").splitlines()  # grow_diag_final, the default
    assert sum(len(parse_pharaoh(line).sure) for line in written) == scores["grow_diag_final" + EOS_UNALIGNED]["links"]


def test_the_report_scores_each_method_with_and_without_eos_unaligned(tmp_path: Path, caplog) -> None:
    """Each pair: 2 source words, 2 target words; target word 1 of pair 0 attends most to ``</s>``
    in the forward model, source word 0 of pair 1 in the backward one."""
    forward = [np.array([[0.8, 0.1, 0.1], [0.3, 0.1, 0.6]]), np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1]])]
    backward = [np.array([[0.9, 0.1, 0.0], [0.1, 0.9, 0.0]]), np.array([[0.2, 0.1, 0.7], [0.0, 0.9, 0.1]])]
    methods = extract_links(forward, backward, "argmax", 0.0, (False, True))
    assert list(methods) == [m + s for m in ("forward", "backward", *SYMMETRIZATIONS) for s in ("", EOS_UNALIGNED)]
    assert methods["forward"] == [{(0, 0), (0, 1)}, {(0, 0), (1, 1)}]  # word 1 of pair 0 to its runner-up
    assert methods["forward" + EOS_UNALIGNED] == [{(0, 0)}, {(0, 0), (1, 1)}]
    assert methods["backward" + EOS_UNALIGNED] == [{(0, 0), (1, 1)}, {(1, 1)}]
    assert methods["intersection" + EOS_UNALIGNED] == [{(0, 0)}, {(1, 1)}]
    assert list(extract_links(forward, None, "argmax", 0.0, (True,))) == ["forward" + EOS_UNALIGNED]
    gold = [GoldAlignment({(0, 0)}, {(0, 0)}), GoldAlignment({(0, 0), (1, 1)}, {(0, 0), (1, 1)})]
    settings = {"ckpt": "a.pt", "reverse_ckpt": "b.pt", "gold": "gold.txt", "method": "argmax", "threshold": 0.0}
    align = {"eos_unaligned": True, "full_context": False}
    cfg = OmegaConf.create({**settings, "align": align, "report": str(tmp_path / "r.json")})
    with caplog.at_level("INFO", logger="nmt.align"):
        report = _report(cfg, methods, gold, ["a b", "c d"], ["w x", "y z"])
    assert report == json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["eos_unaligned"] is True and report["full_context"] is False
    assert list(report["scores"]) == [*methods, "diagonal"]
    assert report["scores"]["forward"]["precision"] == 0.75 and report["scores"]["forward" + EOS_UNALIGNED]["aer"] == 0.0
    table = [record.getMessage().split()[0] for record in caplog.records]
    assert table == ["method", *methods, "diagonal"]  # both variants printed, one row each


@pytest.mark.parametrize(("extra", "message"), [
    (["pairs={bad}"], r"bad.txt, line 1: expected 'source \|\|\| target'"),
    (["src={src}", "pairs={bad}"], "give the sentences once"),
    (["src={src}", "method=max"], "method='max': choose one of argmax, threshold"),
    (["src={src}", "report={tmp}/r.json"], "report needs gold links"),
    (["src={src}", "tgt={src}", "gold={bad}"], r"bad.txt, line 1: 'a' is not a link"),
    (["src={src}", "tgt={src}", "align.full_context=true"], "align.full_context reads a Transformer decoder's"),
])  # fmt: skip
@pytest.mark.slow
def test_bad_input_is_one_line(smoke_run: SmokeRun, pair_files, tmp_path: Path, extra: list[str], message: str) -> None:
    import re

    src, _ = pair_files
    bad = _write(tmp_path / "bad.txt", ["a b c"])
    filled = [e.format(bad=bad, src=src, tmp=tmp_path) for e in extra]
    proc = _align(f"ckpt={smoke_run.checkpoint}", *filled)
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and len(errors) == 1 and re.search(message, errors[0]), proc.stderr[-2000:]


@pytest.mark.parametrize(("labels", "direction"), [(("src", "tgt"), "src->tgt"), (("tgt", "xx"), "tgt->xx")],
                         ids=["same-direction", "other-languages"])  # fmt: skip
@pytest.mark.slow
def test_a_reverse_model_must_translate_the_other_way(smoke_run: SmokeRun, pair_files, tmp_path: Path,
                                                      labels: tuple[str, str], direction: str) -> None:  # fmt: skip
    src, tgt = pair_files
    reverse = _labelled(smoke_run, tmp_path / "reverse.pt", *labels)
    proc = _align(f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", f"reverse_ckpt={reverse}")
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert (f"reverse_ckpt={reverse} translates {direction}, but ckpt={smoke_run.checkpoint} translates src->tgt: "
            "the reverse model must translate tgt->src") in errors[0]  # fmt: skip
    assert not proc.stdout
