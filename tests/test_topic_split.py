"""``scripts/topic_split.py``: a corpus split by topic into in-domain and general pairs, for the
fine-tuning walk-through; every pair kept whole, in order, and bad input refused before a file is
written."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import topic_split  # noqa: E402

SRC = ["Ein Hund rennt.", "Ein Mann liest.", "Zwei Hunde spielen.", "Ein Kind lacht."]
TGT = ["A dog runs.", "A man reads.", "Two DOGS play.", "A child laughs about dogma."]


def corpus(folder: Path, src: list[str] = SRC, tgt: list[str] = TGT) -> tuple[Path, Path]:
    paths = folder / "train.de.gz", folder / "train.en"
    with gzip.open(paths[0], "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in src))
    paths[1].write_text("".join(line + "\n" for line in tgt), encoding="utf-8")
    return paths


def test_pairs_go_whole_to_one_part_in_order(tmp_path: Path, capsys) -> None:
    src, tgt = corpus(tmp_path)
    out = tmp_path / "dogs"
    topic_split.main(["--src", str(src), "--tgt", str(tgt), "--pattern", r"\bdogs?\b", "--out", str(out)])
    read = lambda name: (out / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    assert read("train.in.de") == [SRC[0], SRC[2]] and read("train.in.en") == [TGT[0], TGT[2]]  # any case; not dogma
    assert read("train.general.de") == [SRC[1], SRC[3]] and read("train.general.en") == [TGT[1], TGT[3]]
    assert "2 of 4 pairs in-domain (50.0%)" in capsys.readouterr().out
    topic_split.main(["--src", str(src), "--tgt", str(tgt), "--pattern", "Hunde", "--side", "src", "--case-sensitive",
                      "--out", str(out), "--name", "val"])  # fmt: skip
    assert read("val.in.en") == [TGT[2]]


@pytest.mark.parametrize("problem", ["lengths", "no match", "bad pattern", "same suffix"])
def test_bad_input_is_refused_naming_it_and_nothing_is_written(problem: str, tmp_path: Path) -> None:
    src, tgt = corpus(tmp_path, tgt=TGT[:3] if problem == "lengths" else TGT)
    out = tmp_path / "out"
    pattern = {"no match": "cat", "bad pattern": "dog(s"}.get(problem, "dog")
    extra = ["--src-lang", "x", "--tgt-lang", "x"] if problem == "same suffix" else []
    with pytest.raises(SystemExit) as stop:
        topic_split.main(["--src", str(src), "--tgt", str(tgt), "--pattern", pattern, "--out", str(out), *extra])
    message = str(stop.value)
    expected = {"lengths": "has 4 lines", "no match": "matches no line", "bad pattern": "not a regular expression",
                "same suffix": "--src-lang"}[problem]  # fmt: skip
    assert expected in message
    assert not out.exists()
