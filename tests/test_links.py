"""``nmt.links``: a line of links for every pair of a corpus, word indices of the lines as given
(a pair with an empty side an empty line), eflomal's two directions symmetrised, output that does
not fit the pairs refused, a missing eflomal refused in one line that says how to install it, with
nothing written; and eflomal itself finding the known links of a small made-up corpus."""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import CONFIG_DIR, REPO_ROOT, ToyCorpus
from hydra import compose, initialize_config_dir

from nmt.configs.help import command_help
from nmt.errors import ConfigError
from nmt.evaluation.word_alignment import GoldAlignment, alignment_error_rate, parse_pharaoh
from nmt.links import eflomal_links, links


def _write(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _cfg(**values):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("links", overrides=[f"{key}={value}" for key, value in values.items()])


class FakeAligner:
    """eflomal's ``Aligner`` as far as :mod:`nmt.links` uses it: the forward links are the diagonal
    (i-i), the backward ones 0-0 only (``offset`` shifts them, to make links beyond the words)."""

    inputs: list[tuple[list[str], list[str]]] = []
    offset = 0

    def align(self, src_input, trg_input, links_filename_fwd: str, links_filename_rev: str) -> None:
        sources, targets = list(src_input), list(trg_input)
        FakeAligner.inputs.append((sources, targets))
        diagonal = [" ".join(f"{i + self.offset}-{i}" for i in range(min(len(s.split()), len(t.split()))))
                    for s, t in zip(sources, targets)]  # fmt: skip
        Path(links_filename_fwd).write_text("".join(line + "\n" for line in diagonal), encoding="utf-8")
        Path(links_filename_rev).write_text("0-0\n" * len(sources), encoding="utf-8")


@pytest.fixture
def fake_eflomal(monkeypatch: pytest.MonkeyPatch) -> type[FakeAligner]:
    monkeypatch.setitem(sys.modules, "eflomal", types.SimpleNamespace(Aligner=FakeAligner))
    monkeypatch.setattr(FakeAligner, "inputs", [])
    monkeypatch.setattr(FakeAligner, "offset", 0)
    return FakeAligner


def test_links_index_the_words_as_given_and_empty_pairs_get_empty_lines(fake_eflomal) -> None:
    sources = ["a  b\tc", "", "d e", "\u00a0f\u00a0g ", "h"]
    targets = ["A B", "x y", "   ", "F G H", "H"]
    forward, backward = eflomal_links(sources, targets)
    # eflomal sees only the pairs with words on both sides, each word once, one space apart
    assert fake_eflomal.inputs == [(["a b c\n", "f g\n", "h\n"], ["A B\n", "F G H\n", "H\n"])]
    assert forward == [{(0, 0), (1, 1)}, set(), set(), {(0, 0), (1, 1)}, {(0, 0)}]
    assert backward == [{(0, 0)}, set(), set(), {(0, 0)}, {(0, 0)}]
    assert eflomal_links(["", "a"], ["b", ""]) == ([set(), set()], [set(), set()])  # eflomal not run
    assert len(fake_eflomal.inputs) == 1


def test_aligner_output_that_does_not_fit_the_pairs_is_refused(fake_eflomal) -> None:
    fake_eflomal.offset = 1  # source word 2 of a two-word source
    with pytest.raises(RuntimeError, match="beyond pair 2's words: 1-0 2-1"):
        eflomal_links(["", "a b"], ["x", "y z"])
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        eflomal_links(["a", "b"], ["c"])


@pytest.mark.parametrize("symmetrization", ["intersection", "union"])
def test_the_command_writes_a_line_a_pair(fake_eflomal, tmp_path: Path, symmetrization: str) -> None:
    src = _write(tmp_path / "train.src.gz", ["a b c", "", "d e"])
    tgt = _write(tmp_path / "train.tgt", ["A B C", "x", "D E"])
    out = tmp_path / "sub" / "train.links"
    assert links(_cfg(src=src, tgt=tgt, output=out, symmetrize=symmetrization)) == 3
    expected = {"intersection": ["0-0", "", "0-0"], "union": ["0-0 1-1 2-2", "", "0-0 1-1"]}[symmetrization]
    assert out.read_text(encoding="utf-8").splitlines() == expected


def test_the_training_pairs_of_a_data_config_get_a_line_each(fake_eflomal, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    """data=...: the corpus's training pairs, then data.extra_train's, in data.text_form, as a run
    reads them: the file guided alignment needs (nothing of the validation or test splits)."""
    extra = _write(tmp_path / "extra.pairs", ["Ana, BEL ||| ZUP YEX!"])
    out = tmp_path / "train.links"
    overrides = [*toy_corpus.overrides(), f"data.cache_dir={tmp_path / 'cache'}", f"data.extra_train.pairs={extra}",
                 "data.text_form=lowercase_tokenized", f"output={out}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("links", overrides=overrides)
    assert links(cfg) == len(toy_corpus.src_lines) + 1
    sources, targets = fake_eflomal.inputs[0]
    assert sources[-1] == "ana , bel\n" and targets[-1] == "zup yex !\n"
    assert [t.strip() for t in targets[:-1]] == [t.lower() for t in toy_corpus.tgt_lines]
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(toy_corpus.src_lines) + 1
    with pytest.raises(ConfigError, match="give the sentences once"):
        links(_cfg(src=extra, tgt=extra, output=out, data="synthetic"))
    with pytest.raises(ConfigError, match="is the input file"):
        links(_cfg(output=extra, data="files", **{"data.extra_train.pairs": extra}, **dict(
            o.split("=", 1) for o in toy_corpus.overrides()[1:])))


@pytest.mark.parametrize(("values", "message"), [
    ({"tgt": "{tgt}", "output": "{out}"}, "src is required"),
    ({"src": "{src}", "tgt": "{tgt}", "output": "{out}", "symmetrize": "grow"}, "symmetrize='grow': choose one of"),
    ({"src": "{src}", "tgt": "{src}", "output": "{src}"}, "is the input file"),
])  # fmt: skip
def test_bad_settings_are_refused_before_any_work(fake_eflomal, tmp_path: Path, values: dict, message: str) -> None:
    src, tgt = _write(tmp_path / "s.txt", ["a"]), _write(tmp_path / "t.txt", ["b"])
    filled = {key: value.format(src=src, tgt=tgt, out=tmp_path / "out.txt") for key, value in values.items()}
    with pytest.raises(ConfigError, match=message):
        links(_cfg(**filled))
    assert not fake_eflomal.inputs and not (tmp_path / "out.txt").exists()


def test_files_of_other_lengths_are_refused(fake_eflomal, tmp_path: Path) -> None:
    src, tgt = _write(tmp_path / "s.txt", ["a", "b"]), _write(tmp_path / "t.txt", ["c"])
    with pytest.raises(ValueError, match=r"t.txt has 1 lines but .*s.txt has 2"):
        links(_cfg(src=src, tgt=tgt, output=tmp_path / "out.txt"))
    assert not (tmp_path / "out.txt").exists()


def test_without_eflomal_it_says_how_to_install_it_and_writes_nothing(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal raises ImportError
    src, tgt = _write(tmp_path / "s.txt", ["a"]), _write(tmp_path / "t.txt", ["b"])
    with pytest.raises(ConfigError, match=r"eflomal is not installed: pip install 'nmt\[align\]'"):
        links(_cfg(src=src, tgt=tgt, output=tmp_path / "out.txt"))
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.slow
def test_without_eflomal_the_command_exits_2_with_one_line(tmp_path: Path) -> None:
    src, tgt = _write(tmp_path / "s.txt", ["a"]), _write(tmp_path / "t.txt", ["b"])
    out = tmp_path / "out.txt"
    code = ("import runpy, sys; sys.modules['eflomal'] = None; "
            f"sys.argv = ['nmt.links', 'src={src}', 'tgt={tgt}', 'output={out}']; "
            "runpy.run_module('nmt.links', run_name='__main__')")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert errors[0].endswith("eflomal is not installed: pip install 'nmt[align]' (or pip install eflomal)")
    assert not out.exists() and not proc.stdout


def test_every_setting_is_in_the_help() -> None:
    text = command_help(CONFIG_DIR, "links")
    assert text.startswith("python -m nmt.links src=")
    for key in _cfg(src="s", tgt="t", output="o"):
        assert f"\n{key}: " in text, key


def synthetic_pairs(num_pairs: int, seed: int = 0) -> tuple[list[str], list[str], list[set[tuple[int, int]]]]:
    """Pairs of 3-8 distinct words, each translated word for word by a fixed dictionary, with some
    neighbours swapped in the target; and their exact links. The first source word is capitalised
    (eflomal compares words lower-cased, and the links still index the words as given)."""
    rng = random.Random(seed)
    vocabulary = [f"w{k}" for k in range(40)]
    sources, targets, gold = [], [], []
    for _ in range(num_pairs):
        words = rng.sample(vocabulary, rng.randint(3, 8))
        order = list(range(len(words)))  # target word j translates source word order[j]
        j = 0
        while j < len(order) - 1:
            if rng.random() < 0.25:
                order[j], order[j + 1] = order[j + 1], order[j]
                j += 1
            j += 1
        sources.append(" ".join([words[0].upper(), *words[1:]]))
        targets.append(" ".join(f"t{words[i][1:]}" for i in order))
        gold.append({(i, j) for j, i in enumerate(order)})
    return sources, targets, gold


def test_eflomal_finds_the_links_of_a_made_up_corpus(tmp_path: Path) -> None:
    pytest.importorskip("eflomal")
    sources, targets, gold = synthetic_pairs(200)
    sources[5], targets[7] = "", " "  # pairs with an empty side
    src, tgt = _write(tmp_path / "train.src", sources), _write(tmp_path / "train.tgt", targets)
    out = tmp_path / "train.links"
    assert links(_cfg(src=src, tgt=tgt, output=out)) == 200
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 and lines[5] == lines[7] == ""
    found = [parse_pharaoh(line).sure for line in lines]
    for line, source, target in zip(found, sources, targets):
        assert all(0 <= i < len(source.split()) and 0 <= j < len(target.split()) for i, j in line)
    kept = [k for k in range(200) if k not in (5, 7)]
    scores = alignment_error_rate([found[k] for k in kept], [GoldAlignment(gold[k], gold[k]) for k in kept])
    assert scores["aer"] < 0.1, scores  # the diagonal: 0.37
