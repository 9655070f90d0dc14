"""Scoring given translations (forced decoding): the score of a search output is the score search
reported for it (greedy: the sum; beam: normalised by the length penalty), for a model and an
ensemble; the command writes JSON lines or TSV, reads the target from stdin, reranks an n-best
list, and refuses mismatched input in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun, build_tiny_model, random_batch

from nmt.ensemble import Ensemble
from nmt.score import Candidate, rerank
from nmt.search import beam_search, force_decode, greedy_search, length_penalty
from nmt.translator import Score, Translator


@pytest.mark.parametrize("ensemble", [False, True])
def test_the_score_of_a_search_output_is_the_score_search_reported(ensemble: bool) -> None:
    model = build_tiny_model("bahdanau", "luong_feed", seed=4)
    if ensemble:
        model = Ensemble([model, build_tiny_model("bahdanau", "luong_feed", seed=5)]).eval()
    src, src_lens, _ = random_batch([6, 3, 5], 2, seed=2)
    greedy = [hyps[0] for hyps in greedy_search(model, src, src_lens, 1.5, 3, return_attention=True)]
    scored = force_decode(model, src, src_lens, [h.tokens for h in greedy], return_attention=True)
    for hyp, one in zip(greedy, scored):
        assert one.total == pytest.approx(hyp.score, abs=1e-4)
        torch.testing.assert_close(one.attention, hyp.attention, atol=1e-5, rtol=0)
    beams = beam_search(model, src, src_lens, 3, 3, "gnmt", 0.6, 1.5, 3, return_attention=False)
    for row, sentence in enumerate(beams):
        rows = [row] * len(sentence)
        scored = force_decode(model, src[rows], src_lens[rows], [h.tokens for h in sentence])
        for hyp, one in zip(sentence, scored):
            lp = float(length_penalty(torch.tensor(float(len(hyp.tokens) + 1)), "gnmt", 0.6))
            assert one.total / lp == pytest.approx(hyp.score, abs=1e-4)


def test_rerank_picks_each_source_lines_best_candidate() -> None:
    scores = [Score(-1.0, n, [], []) for n in (-2.0, -1.0, -3.0, -0.5)]
    candidates = [Candidate(0, -9.0, "a"), Candidate(0, -0.1, "b"), Candidate(2, 0.0, "c"), Candidate(2, -5.0, "d")]
    assert rerank(scores, candidates, 3, weight=0.0) == ["b", "", "d"]
    assert rerank(scores, candidates, 3, weight=1.0) == ["b", "", "c"]  # -3 + 0 beats -0.5 - 5


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args, "threads=1"], input=stdin, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.mark.slow
def test_the_command_scores_greedy_translations_as_greedy_search_did(smoke_run: SmokeRun, tmp_path: Path, in_process):
    translator = Translator.from_checkpoint(smoke_run.checkpoint, device="cpu")
    sources = smoke_run.test_src[:20]
    greedy = translator.translate(sources, beam_size=1)
    src, tgt = _write(tmp_path / "src.txt", sources), _write(tmp_path / "hyp.txt", [r.text for r in greedy])
    proc = _run("nmt.score", f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={tgt}", f"output={tmp_path / 's.jsonl'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in records] == list(range(1, 21))
    same = [(r, g) for r, g in zip(records, greedy) if r["tokens"] == g.tgt_tokens]  # the text re-segments alike
    assert len(same) >= 18
    for record, result in same:
        assert record["logprob"] == pytest.approx(result.score, abs=1e-3)
        assert sum(record["token_logprobs"]) == pytest.approx(record["logprob"], abs=1e-3)
        assert record["length"] == len(record["tokens"]) == len(record["token_logprobs"])
    assert "perplexity" in proc.stderr
    # the API gives the same figures; TSV from stdin gives the same numbers
    api = translator.score(sources, [r.text for r in greedy])
    assert [round(s.logprob, 3) for s in api] == [round(r["logprob"], 3) for r in records]
    proc = _run("nmt.score", f"ckpt={smoke_run.checkpoint}", f"src={src}", "format=tsv",
                stdin=tgt.read_text(encoding="utf-8"))  # fmt: skip
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and len(rows) == 20 and all(len(row) == 4 for row in rows), proc.stderr[-2000:]
    assert [float(row[1]) for row in rows] == pytest.approx([r["logprob"] for r in records], abs=1e-3)


@pytest.mark.slow
def test_reranking_an_nbest_list_with_its_own_model_keeps_the_beams_choice(smoke_run: SmokeRun, tmp_path: Path) -> None:
    """Scored again by the model that wrote it, with its own length penalty, each n-best list's
    best is the beam's first hypothesis (where the text re-segments as the model wrote it)."""
    src = _write(tmp_path / "src.txt", smoke_run.test_src[:15])
    nbest, best = tmp_path / "nbest.txt", tmp_path / "best.txt"
    for out, extra in ((nbest, ["beam_size=4", "n_best=4"]), (best, ["beam_size=4"])):
        proc = _run("nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={src}", f"output={out}", *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
    reranked = tmp_path / "reranked.txt"
    proc = _run("nmt.score", f"ckpt={smoke_run.checkpoint}", f"src={src}", f"tgt={nbest}", "nbest=true",
                f"rerank={reranked}", f"output={tmp_path / 'scores.jsonl'}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(nbest.read_text(encoding="utf-8").splitlines())
    assert all(r["normalized"] == pytest.approx(r["nbest_score"], abs=1e-3) for r in records[:4])
    chosen, beam = reranked.read_text(encoding="utf-8").splitlines(), best.read_text(encoding="utf-8").splitlines()
    assert len(chosen) == 15 and sum(a == b for a, b in zip(chosen, beam)) >= 13


@pytest.mark.parametrize(("extra", "message"), [
    (["tgt={short}"], "short.txt has 1 lines but .*src.txt has 3"),
    (["tgt={bad}", "nbest=true"], r"bad.txt, line 2: expected index<TAB>score<TAB>text"),
    (["tgt={short}", "rerank={tmp}/r.txt"], "rerank needs an n-best list"),
    (["tgt={short}", "format=csv"], "format='csv': choose one of jsonl, tsv"),
])  # fmt: skip
@pytest.mark.slow
def test_bad_input_is_one_line(smoke_run: SmokeRun, tmp_path: Path, extra: list[str], message: str) -> None:
    src = _write(tmp_path / "src.txt", smoke_run.test_src[:3])
    _write(tmp_path / "short.txt", ["x"])
    _write(tmp_path / "bad.txt", ["0\t-1.0\tok", "not a score line"])
    filled = [e.format(short=tmp_path / "short.txt", bad=tmp_path / "bad.txt", tmp=tmp_path) for e in extra]
    proc = _run("nmt.score", f"ckpt={smoke_run.checkpoint}", f"src={src}", *filled)
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
    assert re.search(message, errors[0]), errors[0]
