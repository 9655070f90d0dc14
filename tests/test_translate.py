"""``nmt.translate``: exactly one output line per input line whatever the input (empty, very long,
control characters, arbitrary Unicode: property-based), n-best lists, alignment files, clear errors
for bad UTF-8 and bad checkpoints, stdin/stdout pipes that leave nothing behind in the current
directory, and averaged checkpoints that it loads."""

from __future__ import annotations

import io
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, SmokeRun
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import load_checkpoint, load_model, model_from_checkpoint, save_checkpoint
from nmt.data.text import DataError, decode_lines
from nmt.errors import CheckpointError
from nmt.model import build_model
from nmt.search import SearchSettings
from nmt.translate import block_lines, format_translations, keep_partial, read_input, translate, write_attention
from nmt.translator import Translator, translate_lines

CPU = torch.device("cpu")
GREEDY = SearchSettings(beam_size=1, n_best=1, length_penalty="none", alpha=0.0, max_len_a=1.5, max_len_b=10)
BEAM = SearchSettings(beam_size=3, n_best=1, length_penalty="gnmt", alpha=0.6, max_len_a=1.5, max_len_b=10)


@pytest.fixture(scope="module")
def translator(smoke_run: SmokeRun):
    """The smoke model, its vocabularies and config, loaded as ``nmt.translate`` does."""
    return load_model(smoke_run.checkpoint, CPU)


def run_lines(translator, lines: list[str], search: SearchSettings = GREEDY, max_src_len: int = 50) -> str:
    model, src_vocab, tgt_vocab, _ = translator
    translations = translate_lines(model, src_vocab, lines, search, 16, "sentences", CPU, max_src_len)
    return format_translations(translations, tgt_vocab, search.n_best)


def translate_cfg(**values) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("translate", overrides=[f"{key}={value}" for key, value in values.items()])


def test_one_output_line_per_input_line_in_order(translator, smoke_run: SmokeRun) -> None:
    lines = [smoke_run.test_src[0], "", smoke_run.test_src[1], "   ", smoke_run.test_src[0], "", ""]
    output = run_lines(translator, lines, BEAM).split("\n")
    assert output[-1] == "" and len(output) == len(lines) + 1  # every line ends with \n
    assert output[1] == output[3] == output[5] == output[6] == ""
    assert output[0] == output[4] != ""  # a sentence's translation does not depend on its neighbours
    alone = [run_lines(translator, [line], BEAM) for line in smoke_run.test_src[:2]]
    assert [output[0] + "\n", output[2] + "\n"] == alone
    assert run_lines(translator, []) == ""


def test_long_lines_are_truncated_with_a_warning_not_dropped(translator, smoke_run, caplog) -> None:
    long_line = " ".join(smoke_run.test_src[:40])  # ~200 subwords
    lines = [smoke_run.test_src[2], long_line, smoke_run.test_src[3]]
    model, src_vocab, _, _ = translator
    with caplog.at_level(logging.WARNING, logger="nmt.translate"):
        translations = translate_lines(model, src_vocab, lines, GREEDY, 16, "sentences", CPU, max_src_len=30)
    assert [len(t.src_ids) for t in translations] == [len(src_vocab.encode([lines[0]])[0]), 30,
                                                      len(src_vocab.encode([lines[2]])[0])]  # fmt: skip
    assert all(t.hypotheses for t in translations)
    assert [r.getMessage() for r in caplog.records if "line 2:" in r.getMessage() and "max_src_len=30" in r.getMessage()]
    assert not [r for r in caplog.records if "line 1:" in r.getMessage() or "line 3:" in r.getMessage()]


def test_input_is_split_at_newlines_only(tmp_path: Path, monkeypatch) -> None:
    odd = ["a\x0bb", "c\x1cd\x1de\x1ef", "g\u2028h\u2029i", "j\x85k\x0cl", "m\rn", "", "  "]
    raw = "\r\n".join(odd).encode("utf-8") + b"\n"  # CRLF line ends are accepted too
    # seven lines; control characters (not the line and paragraph separators) read as spaces
    expected = ["a b", "c d e f", "g\u2028h\u2029i", "j k l", "m n", "", "  "]
    assert decode_lines(raw, "<test>") == expected
    (tmp_path / "in.txt").write_bytes(raw)
    assert read_input(str(tmp_path / "in.txt"), "error") == expected
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    assert read_input("-", "error") == expected


def test_bad_utf8_stops_naming_the_line_unless_replaced(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff\xfe here\nfine\n")
    with pytest.raises(DataError, match=r"bad.txt, line 3: invalid UTF-8.*on_bad_utf8=replace"):
        read_input(str(path), "error")
    assert read_input(str(path), "replace") == ["fine", "also fine", "bad \ufffd\ufffd here", "fine"]
    with pytest.raises(ValueError, match="on_bad_utf8='ignore'"):
        read_input(str(path), "ignore")


# Arbitrary lines (never a "\n", which separates them), with control characters, separators that
# str.splitlines breaks on, empty lines and very long lines.
ODD = ["", " ", "\t", "\x00", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\ufeff"]
any_line = st.one_of(
    st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=40),
    st.sampled_from(ODD),
    st.lists(st.sampled_from(["toga", "sala", "duta", "zepo", "\u2028", "\x0b", "é"]), max_size=8).map(" ".join),
    st.integers(200, 3000).map(lambda n: ("zepo sala " * n)[: n * 7]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(any_line, max_size=8), beam=st.sampled_from([GREEDY, BEAM]))
def test_any_input_gives_exactly_one_line_per_line(translator, lines: list[str], beam: SearchSettings) -> None:
    raw = "".join(line + "\n" for line in lines).encode("utf-8")
    read = decode_lines(raw, "<hypothesis>")
    assert len(read) == len(lines)
    output = run_lines(translator, read, beam, max_src_len=40)
    assert output.count("\n") == len(lines) and (not lines or output.endswith("\n"))
    assert all(not out for line, out in zip(read, output.split("\n")) if not line.strip())


def test_n_best_lists(translator, smoke_run: SmokeRun) -> None:
    lines = [smoke_run.test_src[4], "", smoke_run.test_src[5]]
    search = SearchSettings(beam_size=5, n_best=3, length_penalty="gnmt", alpha=0.6, max_len_a=1.5, max_len_b=10)
    rows = [line.split("\t") for line in run_lines(translator, lines, search).splitlines()]
    assert all(len(row) == 3 for row in rows)
    indices = [int(index) for index, _, _ in rows]
    assert indices == sorted(indices) and set(indices) == {0, 1, 2}
    assert [text for index, _, text in rows if index == "1"] == [""]  # the empty line: one empty entry
    for i in (0, 2):
        scores = [float(score) for index, score, _ in rows if int(index) == i]
        texts = [text for index, _, text in rows if int(index) == i]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True) and len(set(texts)) == 3


def test_cli_in_process_writes_output_and_alignments(smoke_run: SmokeRun, tmp_path: Path) -> None:
    source = tmp_path / "test.src"
    lines = smoke_run.test_src[:5] + [""]
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    cfg = translate_cfg(ckpt=smoke_run.checkpoint, input=source, output=tmp_path / "out" / "hyp.txt",
                        attention_dir=tmp_path / "attention", beam_size=2)  # fmt: skip
    summary = translate(cfg)
    assert summary["sentences"] == 6 and summary["tgt_tokens"] > 0
    hyps = (tmp_path / "out" / "hyp.txt").read_text(encoding="utf-8").split("\n")
    assert len(hyps) == 7 and hyps[5] == "" and all(hyps[:5])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hyp.txt"]  # no temporary file left
    written = sorted(p.name for p in (tmp_path / "attention").iterdir())
    assert written == [f"{i:06d}.{ext}" for i in range(5) for ext in ("json", "png")]  # none for the empty line
    _, src_vocab, _, _ = load_model(smoke_run.checkpoint, CPU)
    for i in range(5):
        record = json.loads((tmp_path / "attention" / f"{i:06d}.json").read_text(encoding="utf-8"))
        weights = torch.tensor(record["weights"])
        assert record["index"] == i
        assert len(record["source"]) == len(src_vocab.encode([lines[i]])[0]) + 1  # + </s>
        assert tuple(weights.shape) == tuple(record["shape"]) == (len(record["target"]), len(record["source"]))
        torch.testing.assert_close(weights.sum(dim=1), torch.ones(len(record["target"])), atol=1e-4, rtol=0)
        assert (tmp_path / "attention" / f"{i:06d}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _attention_of(translator, line: str) -> tuple:
    model, src_vocab, tgt_vocab, _ = translator
    translations = translate_lines(model, src_vocab, [line], GREEDY, 16, "sentences", CPU, 50, return_attention=True)
    return translations, src_vocab, tgt_vocab


def test_a_link_planted_in_the_attention_folder_is_replaced_not_written_through(translator, smoke_run: SmokeRun,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    """Links at a figure's name and at the temporary name ``.<name>.tmp.png`` once used for it:
    the files they point at keep their bytes, and the figure is a file of its own."""
    folder = tmp_path / "attention"
    folder.mkdir()
    victims = {name: tmp_path / f"victim{k}" for k, name in enumerate(("000000.png", ".000000.png.tmp.png",
                                                                        "000000.json"))}  # fmt: skip
    for name, victim in victims.items():
        victim.write_bytes(b"mine\n")
        (folder / name).symlink_to(victim)
    assert write_attention(folder, *_attention_of(translator, smoke_run.test_src[0])) == 1
    assert all(victim.read_bytes() == b"mine\n" for victim in victims.values())
    for name in ("000000.png", "000000.json"):
        assert not (folder / name).is_symlink() and (folder / name).is_file()
    assert (folder / "000000.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_writers_of_the_same_figure_use_temporary_files_of_their_own(translator, smoke_run: SmokeRun,
                                                                       tmp_path: Path, monkeypatch) -> None:  # fmt: skip
    """Two runs writing one attention folder: every rename starts from a temporary name no other
    write used (a shared name lets one run rename the other's half-written file)."""
    renamed: list[str] = []
    real_replace = os.replace

    def recording_replace(src, dst, *args, **kwargs):
        renamed.append(os.path.basename(src))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", recording_replace)
    written = _attention_of(translator, smoke_run.test_src[0])
    for _ in range(2):
        write_attention(tmp_path / "attention", *written)
    assert len(renamed) == 4 and len(set(renamed)) == 4
    assert sorted(p.name for p in (tmp_path / "attention").iterdir()) == ["000000.json", "000000.png"]


SYSTEM = {"_target_": "os.system", "command": "touch pwned"}


def _payload(smoke_run: SmokeRun) -> dict:
    return load_checkpoint(smoke_run.checkpoint)


BAD_CHECKPOINTS = {
    "missing": (lambda path, run: None, "no such checkpoint"),
    "truncated": (lambda path, run: path.write_bytes(run.checkpoint.read_bytes()[:5000]), "not a readable checkpoint"),
    "garbage": (lambda path, run: path.write_bytes(b"\x00not a checkpoint" * 100), "not a readable checkpoint"),
    "foreign": (lambda path, run: torch.save({"weights": torch.zeros(3)}, path), "not an nmt checkpoint"),
    "other_architecture": (
        lambda path, run: torch.save({**_payload(run), "model": {"encoder.rnn.weight": torch.zeros(1)}}, path),
        "do not fit",
    ),
    "incomplete_config": (
        lambda path, run: torch.save({**_payload(run), "config": {**_payload(run)["config"], "model": {"dropout": 0.1}}},
                                     path),
        "cannot build a model: model.encoder is missing",
    ),
    "foreign_code_in_config": (  # instantiating it would call os.system: refused before
        lambda path, run: torch.save({**_payload(run), "config": {**_payload(run)["config"], "model": {
            **_payload(run)["config"]["model"], "encoder": SYSTEM}}}, path),
        "model.encoder._target_='os.system': not one of nmt's encoder classes",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_CHECKPOINTS))
def test_bad_checkpoints_are_refused_with_one_clear_error(kind: str, smoke_run: SmokeRun, tmp_path: Path) -> None:
    make, message = BAD_CHECKPOINTS[kind]
    path = tmp_path / "model.pt"
    make(path, smoke_run)
    with pytest.raises(CheckpointError, match=message) as error:
        load_model(path, CPU)
    assert str(path) in str(error.value) and "\n" not in str(error.value).strip()


def _cli(args: list[str], cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt.translate", *args], cwd=cwd, input=stdin,
                          capture_output=True, timeout=120)  # fmt: skip


@pytest.mark.slow
def test_cli_pipes_stdin_to_stdout_and_leaves_the_directory_clean(smoke_run: SmokeRun, tmp_path: Path) -> None:
    lines = [smoke_run.test_src[6], "", "x\x0by\u2028z", smoke_run.test_src[7]]
    raw = "\n".join(lines).encode("utf-8")  # no final newline: still four lines
    proc = _cli([f"ckpt={smoke_run.checkpoint}", "beam_size=2"], tmp_path, stdin=raw)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")
    assert len(out) == 5 and out[1] == "" and out[0] and out[3]
    assert "4 sentences" in proc.stderr.decode() and "sentences/s" in proc.stderr.decode()
    assert list(tmp_path.iterdir()) == []  # no outputs/, .hydra/ or log file


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(smoke_run: SmokeRun, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pt"
    broken.write_bytes(smoke_run.checkpoint.read_bytes()[:1000])
    proc = _cli([f"ckpt={broken}"], tmp_path, stdin=b"toga sala\n")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err and proc.stdout == b""
    assert f"{broken}: not a readable checkpoint" in err and len(err.strip().splitlines()) == 1
    proc = _cli([f"ckpt={smoke_run.checkpoint}"], tmp_path, stdin=b"toga\nsala \xff\n")
    assert proc.returncode == 2 and "<stdin>, line 2: invalid UTF-8" in proc.stderr.decode()
    assert proc.stdout == b""


@pytest.mark.slow
def test_averaged_checkpoints_load_and_translate(smoke_run: SmokeRun, tmp_path: Path) -> None:
    steps = sorted((smoke_run.folder / "checkpoints").glob("step*.pt"))
    assert len(steps) >= 2
    output = tmp_path / "averaged.pt"
    proc = subprocess.run([sys.executable, "-m", "nmt.average", str(smoke_run.folder),
                           "--last", "2", "--output", str(output)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    averaged = load_checkpoint(output)
    assert averaged["train_state"] is None
    weights = [load_checkpoint(path)["model"] for path in steps[-2:]]
    for name, tensor in averaged["model"].items():
        torch.testing.assert_close(tensor, (weights[0][name] + weights[1][name]) / 2)
    model, src_vocab, tgt_vocab, _ = model_from_checkpoint(averaged)
    assert run_lines((model, src_vocab, tgt_vocab, None), smoke_run.test_src[:3]).count("\n") == 3


def test_models_without_attention_refuse_attention_dir(smoke_run: SmokeRun, tmp_path: Path) -> None:
    payload = load_checkpoint(smoke_run.checkpoint)
    config = OmegaConf.create(payload["config"])
    config.model.attention = {"_target_": "nmt.attention.NoAttention"}
    _, src_vocab, tgt_vocab, _ = model_from_checkpoint(payload)
    model = build_model(config.model, len(src_vocab), len(tgt_vocab))
    save_checkpoint(tmp_path / "noattn.pt", model, config, src_vocab, tgt_vocab)
    (tmp_path / "in.txt").write_text(smoke_run.test_src[0] + "\n", encoding="utf-8")
    cfg = translate_cfg(ckpt=tmp_path / "noattn.pt", input=tmp_path / "in.txt", attention_dir=tmp_path / "alignments")
    with pytest.raises(ValueError, match="no attention"):
        translate(cfg)


def test_the_checkpoints_own_decoding_is_the_default(smoke_run: SmokeRun, tmp_path: Path, in_process) -> None:
    """A recipe's tuned decoding (its ``train.search``) travels in the checkpoint: translate uses it
    unless a key is given, and a key given replaces that key only."""
    payload = load_checkpoint(smoke_run.checkpoint)
    payload["config"]["train"]["search"].update(beam_size=3, n_best=2)  # as if a recipe had tuned these
    ckpt = tmp_path / "tuned.pt"
    torch.save(payload, ckpt)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(smoke_run.test_src[:4]) + "\n", encoding="utf-8")

    translate(translate_cfg(ckpt=ckpt, input=source, output=tmp_path / "default.txt"))
    rows = [line.split("\t") for line in (tmp_path / "default.txt").read_text(encoding="utf-8").splitlines()]
    assert [int(index) for index, _, _ in rows].count(0) == 2, "n_best=2 from the checkpoint: two lines a sentence"

    translate(translate_cfg(ckpt=ckpt, input=source, output=tmp_path / "one.txt", n_best=1))
    one = (tmp_path / "one.txt").read_text(encoding="utf-8").splitlines()
    assert len(one) == 4 and one == [text for index, _, text in rows[::2]], "beam 3 kept, n_best replaced"


def test_a_model_trained_on_lower_cased_tokenized_text_gets_its_input_in_that_form(smoke_run: SmokeRun,
                                                                                    tmp_path: Path) -> None:
    """data.text_form travels in the checkpoint: nmt.translate, nmt.score and the Translator put
    each line in it, so "A DOG RUNS." is translated as "a dog runs ." is."""
    payload = load_checkpoint(smoke_run.checkpoint)
    payload["config"]["data"]["text_form"] = "lowercase_tokenized"
    ckpt = tmp_path / "formed.pt"
    torch.save(payload, ckpt)
    formed = [line + " ." for line in smoke_run.test_src[:4]]  # the toy corpus is lower-case words
    shouted = [line.upper() + "." for line in smoke_run.test_src[:4]]
    for name, lines in (("formed", formed), ("shouted", shouted)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for model in (smoke_run.checkpoint, ckpt):
        for name in ("formed", "shouted"):
            out = tmp_path / f"{Path(model).stem}.{name}.out"
            translate(translate_cfg(ckpt=model, input=tmp_path / f"{name}.txt", output=out))
            outputs[Path(model).stem, name] = out.read_text(encoding="utf-8")
    assert outputs["formed", "shouted"] == outputs["formed", "formed"]
    assert outputs["formed", "formed"] == outputs[Path(smoke_run.checkpoint).stem, "formed"]
    assert outputs[Path(smoke_run.checkpoint).stem, "shouted"] != outputs["formed", "formed"], "as_is reads it as given"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    assert [r.text for r in translator.translate(shouted)] == outputs["formed", "formed"].splitlines()
    targets = outputs["formed", "formed"].splitlines()
    loud = [t.upper() for t in targets]
    assert [s.logprob for s in translator.score(shouted, loud)] == pytest.approx(
        [s.logprob for s in translator.score(formed, targets)])


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hardlink"])
@pytest.mark.slow
def test_output_that_is_the_input_is_refused_and_the_source_kept(
    spelling: str, smoke_run: SmokeRun, tmp_path: Path
) -> None:
    source = tmp_path / "same.src"
    text = "\n".join(smoke_run.test_src[:2]) + "\n"
    source.write_text(text, encoding="utf-8")
    if spelling == "same":
        output = source
    elif spelling == "dotted":
        (tmp_path / "sub").mkdir()
        output = tmp_path / "sub" / ".." / "same.src"
    elif spelling == "symlink":
        output = tmp_path / "link.src"
        output.symlink_to(source)
    else:
        output = tmp_path / "hard.src"
        os.link(source, output)
    proc = _cli([f"ckpt={smoke_run.checkpoint}", f"input={source}", f"output={output}"], tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert "is the input file" in err and len(err.strip().splitlines()) == 1, err
    assert source.read_text(encoding="utf-8") == text


@pytest.mark.slow
def test_control_characters_become_spaces_with_a_warning_naming_the_line(smoke_run: SmokeRun, tmp_path: Path) -> None:
    first, second = smoke_run.test_src[0].split(" ", 1)
    raw = f"{smoke_run.test_src[1]}\n{first}\x00{second}\n".encode()
    proc = _cli([f"ckpt={smoke_run.checkpoint}", "beam_size=1"], tmp_path, stdin=raw)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "<stdin>: control characters (NUL, escape, ...) replaced by spaces on line(s) 2" in proc.stderr.decode()
    clean = _cli([f"ckpt={smoke_run.checkpoint}", "beam_size=1"], tmp_path, stdin=f"{smoke_run.test_src[0]}\n".encode())
    assert proc.stdout.decode().split("\n")[1] == clean.stdout.decode().split("\n")[0], "NUL reads as the space"


def test_search_keys_given_to_translate_are_checked_like_trainings(smoke_run: SmokeRun, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text(smoke_run.test_src[0] + "\n", encoding="utf-8")
    cfg = translate_cfg(ckpt=smoke_run.checkpoint, input=tmp_path / "in.txt", max_len_a=0, max_len_b=0)
    with pytest.raises(ValueError, match="max_len_a and max_len_b are both 0"):
        translate(cfg)


@pytest.mark.slow
def test_a_pipe_gets_each_translation_before_the_next_line_is_sent(smoke_run: SmokeRun, tmp_path: Path) -> None:
    """Interactive use: the model loads once, and every line's translation comes back (flushed)
    while the next line has not been written yet; the answers equal the batch mode's."""
    lines = smoke_run.test_src[:3] + [""] + smoke_run.test_src[3:4]
    proc = subprocess.Popen([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", "threads=1"],
                            cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    answers = []
    try:
        for line in lines:
            proc.stdin.write((line + "\n").encode())
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, f"no translation of {line!r} within 60 s while the pipe stays open"
            answers.append(proc.stdout.readline().decode().rstrip("\n"))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    batch = _cli([f"ckpt={smoke_run.checkpoint}", f"input={tmp_path / 'in.txt'}"], tmp_path)
    assert answers == batch.stdout.decode().split("\n")[:-1] and answers[3] == ""


# --------------------------------------------------------------------------- Ctrl-C, empty input


@pytest.mark.slow
def test_ctrl_c_keeps_the_lines_translated_so_far_in_output_partial(smoke_run: SmokeRun, tmp_path: Path,
                                                                    in_process) -> None:  # fmt: skip
    """A long file interrupted: the output is left as it was, OUTPUT.partial holds the translations
    of a prefix of the input (line i of it is line i's translation, empty lines too), and the one
    line logged says how many and where."""
    lines = [line if i % 7 else "" for i, line in enumerate(smoke_run.test_src * 1000)]  # ~2 minutes of work
    source, output = tmp_path / "big.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output.write_text("an earlier translation\n", encoding="utf-8")
    args = [f"ckpt={smoke_run.checkpoint}", "beam_size=1", "batch_size=4", "threads=1"]
    # Ctrl-C's default action even where pytest itself was started in the background (`cmd &` leaves
    # SIGINT ignored, and a child inherits that; Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen([sys.executable, "-m", "nmt.translate", *args, f"input={source}", f"output={output}"],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 120
    while "loaded" not in proc.stderr.readline():
        assert proc.poll() is None and time.monotonic() < deadline, "the model did not load"
    time.sleep(3)  # a few hundred lines, of blocks of 64
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert output.read_text(encoding="utf-8") == "an earlier translation\n"
    kept = Path(f"{output}.partial").read_text(encoding="utf-8").split("\n")[:-1]
    assert 0 < len(kept) < len(lines) and len(kept) % block_lines(4, "sentences") == 0
    assert err.strip().splitlines()[-1].endswith(
        f"interrupted: {output}.partial holds the translations of the first {len(kept)} of {len(lines)} input lines; "
        f"{output} is as it was")  # fmt: skip
    assert "Traceback" not in err
    prefix, expected = tmp_path / "prefix.txt", tmp_path / "expected.txt"
    prefix.write_text("\n".join(lines[: len(kept)]) + "\n", encoding="utf-8")
    translate(translate_cfg(**dict(a.split("=", 1) for a in args), input=prefix, output=expected))
    assert kept == expected.read_text(encoding="utf-8").split("\n")[:-1]


def test_an_interruption_before_any_line_or_into_standard_output_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    assert keep_partial(str(output), "", 0, 10) == "interrupted before any line was translated: nothing was written"
    assert keep_partial("-", "a\n", 1, 10).startswith("interrupted after 1 of 10 lines: nothing was written")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_empty_input_file_gives_an_empty_output(smoke_run: SmokeRun, tmp_path: Path) -> None:
    """An empty file is an empty list of sentences: its translation is empty too (a pipeline's
    stage with nothing to do), and the log says so."""
    empty, output = tmp_path / "empty.txt", tmp_path / "out.txt"
    empty.write_bytes(b"")
    proc = _cli([f"ckpt={smoke_run.checkpoint}", f"input={empty}", f"output={output}"], tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert output.read_bytes() == b"" and f"{empty} is empty: the output is empty too" in proc.stderr.decode()


@pytest.mark.slow
def test_an_output_ending_in_a_slash_is_refused_not_written_as_a_file(smoke_run: SmokeRun, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text(smoke_run.test_src[0] + "\n", encoding="utf-8")
    proc = _cli([f"ckpt={smoke_run.checkpoint}", f"input={source}", "output=outdir/"], tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "output=outdir/ names a folder; give a file path" in err
    assert len(err.strip().splitlines()) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
