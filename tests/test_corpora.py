"""Reading parallel text: plain and gzipped files, refused inputs (line counts, invalid UTF-8), and
Multi30k lookup in a local folder, the cache, or (here always failing or faked) the download. No test
touches the network: ``conftest._no_network`` makes every download fail."""

from __future__ import annotations

import gzip
import os
import urllib.error
import urllib.request
from pathlib import Path

import datasets
import pytest
from conftest import ToyCorpus, write_lines
from omegaconf import OmegaConf

from nmt.data.corpora import (
    arrow_batches,
    check_extra_train,
    check_has_text,
    content_key,
    corpus_kind,
    load_corpus,
    pairs_from_files,
    pairs_from_pairs_file,
)
from nmt.data.multi30k import MULTI30K_ENV, check_multi30k_pair, load_multi30k, multi30k_file
from nmt.data.text import DataError, TextSplit, read_lines, read_parallel
from nmt.errors import ConfigError
from nmt.text_form import tokenize
from nmt.training.checks import validate_config

LINES = ["ein Hund läuft", "", "zwei Katzen  schlafen", "Ünïcödé ✓"]


def _write(path: Path, lines: list[str], gz: bool = False, newline: str = "\n") -> Path:
    data = "".join(line + newline for line in lines).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_read_lines(tmp_path: Path, gz: bool) -> None:
    path = _write(tmp_path / ("a.de.gz" if gz else "a.de"), LINES, gz=gz)
    assert read_lines(path) == LINES


def test_read_lines_strips_crlf_and_keeps_a_missing_final_newline(tmp_path: Path) -> None:
    assert read_lines(_write(tmp_path / "crlf.txt", ["a", "b c"], newline="\r\n")) == ["a", "b c"]
    (tmp_path / "no-final.txt").write_bytes(b"a\nb")
    assert read_lines(tmp_path / "no-final.txt") == ["a", "b"]
    (tmp_path / "empty.txt").write_bytes(b"")
    assert read_lines(tmp_path / "empty.txt") == []


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.txt: no such file"):
        read_lines(tmp_path / "nope.txt")


def test_truncated_gzip_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "cut.gz", LINES * 50, gz=True)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match=r"cut\.gz: cannot read"):
        read_lines(path)


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.de"
    path.write_bytes("eins\nzwei\ndrei Bär\n".encode("latin-1"))
    with pytest.raises(DataError) as info:
        read_lines(path)
    assert str(path) in str(info.value)
    assert "line 3" in str(info.value) and "UTF-8" in str(info.value)
    assert read_lines(path, errors="replace")[2] == "drei B\ufffdr"


def test_read_parallel(tmp_path: Path) -> None:
    text = read_parallel(_write(tmp_path / "a.src", ["1", "2"]), _write(tmp_path / "a.tgt", ["one", "two"], gz=False))
    assert (text.src, text.tgt, len(text)) == (["1", "2"], ["one", "two"], 2)
    assert text.src_path.endswith("a.src") and text.tgt_path.endswith("a.tgt")


def test_mismatched_line_counts_are_refused(tmp_path: Path) -> None:
    src = _write(tmp_path / "train.src", ["a", "b", "c"])
    tgt = _write(tmp_path / "train.tgt.gz", ["A", "B"], gz=True)
    with pytest.raises(DataError) as info:
        read_parallel(src, tgt)
    message = str(info.value)
    assert f"{src} has 3 lines" in message and f"{tgt} has 2 lines" in message


# --------------------------------------------------------------------------- Multi30k


@pytest.mark.parametrize("gz", [True, False], ids=["gz", "plain"])
def test_multi30k_local_folder(tmp_path: Path, gz: bool) -> None:
    folder = tmp_path / "m30k"
    for split in ("train", "val", "test_2016_flickr"):
        for lang, prefix in (("de", "ein"), ("en", "a")):
            name = f"{split}.{lang}" + (".gz" if gz else "")
            _write(folder / name, [f"{prefix} {split} {i}" for i in range(3)], gz=gz)
    assert multi30k_file("val", "de", str(folder), tmp_path / "cache") == folder / ("val.de" + (".gz" if gz else ""))
    corpus = load_multi30k("de", "en", {"train": "train", "valid": "val", "test_2016_flickr": "test_2016_flickr"},
                           str(folder), tmp_path / "cache")  # fmt: skip
    assert set(corpus) == {"train", "valid", "test_2016_flickr"}
    assert corpus["valid"].src == ["ein val 0", "ein val 1", "ein val 2"]
    assert corpus["valid"].tgt == ["a val 0", "a val 1", "a val 2"]
    assert not (tmp_path / "cache").exists(), "nothing is downloaded or cached when data.dir has the files"


def test_multi30k_folder_from_environment(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path / "env" / "val.fr.gz", ["un"], gz=True)
    monkeypatch.setenv(MULTI30K_ENV, str(tmp_path / "env"))
    assert multi30k_file("val", "fr", None, tmp_path / "cache") == tmp_path / "env" / "val.fr.gz"


def test_multi30k_download_cache_is_used_offline(tmp_path: Path) -> None:
    cached = _write(tmp_path / "cache" / "multi30k" / "train.en.gz", ["a"], gz=True)
    assert multi30k_file("train", "en", None, tmp_path / "cache") == cached


def test_multi30k_missing_file_in_data_dir_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "m30k"
    _write(folder / "train.de.gz", ["x"], gz=True)
    with pytest.raises(DataError) as info:
        multi30k_file("train", "en", str(folder), tmp_path / "cache")
    message = str(info.value)
    assert str(folder) in message and "train.en.gz" in message and "train.en" in message


def test_multi30k_language_missing_from_split(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"test_2017_flickr has no 'cs' side \(it has en, de, fr\)"):
        multi30k_file("test_2017_flickr", "cs", str(tmp_path), tmp_path)


def test_multi30k_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown Multi30k split 'test_2099'"):
        multi30k_file("test_2099", "en", str(tmp_path), tmp_path)


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [("xx", "en", "data.src_lang='xx'"), ("de", "jp", "data.tgt_lang='jp'"), ("en", "en", "both 'en'")],
)
def test_bad_language_pair(src: str, tgt: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=message):
        check_multi30k_pair(src, tgt)
    with pytest.raises(DataError, match=message):
        load_multi30k(src, tgt, {"train": "train"}, str(tmp_path), tmp_path)


def test_offline_download_failure_explains_data_dir(tmp_path: Path, monkeypatch) -> None:
    calls = []

    def offline(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as info:
        load_multi30k("de", "en", {"train": "train", "valid": "val"}, None, tmp_path / "cache")
    message = str(info.value)
    assert len(calls) == 1, "one failed download gives one error, not a retry per file"
    assert "train.de" in message and "data.dir=" in message and MULTI30K_ENV in message
    assert not list((tmp_path / "cache").rglob("*.gz")), "nothing half-downloaded is left in the cache"


class _FakeResponse:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def test_download_is_verified(tmp_path: Path, monkeypatch) -> None:
    """A download that does not match the official file (checksum, line count) is not cached."""
    fake = gzip.compress(b"not\nthe\nreal\nfile\n")
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: _FakeResponse(fake))
    with pytest.raises(DataError, match="val.en.gz does not match its known sha256"):
        multi30k_file("val", "en", None, tmp_path / "cache")
    with pytest.raises(DataError, match="test_2018_flickr.cs.gz has 4 lines, expected 1071"):
        multi30k_file("test_2018_flickr", "cs", None, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.gz"))


def test_download_is_cached(tmp_path: Path, monkeypatch) -> None:
    """A verified download lands in ``<cache_dir>/multi30k`` (line count only: no known checksum)."""
    fake = gzip.compress("".join(f"line {i}\n" for i in range(1071)).encode())
    urls = []

    def fake_urlopen(url, timeout=None):
        urls.append(url)
        return _FakeResponse(fake)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    path = multi30k_file("test_2018_flickr", "cs", None, tmp_path / "cache")
    assert path == tmp_path / "cache" / "multi30k" / "test_2018_flickr.cs.gz"
    assert urls and urls[0].endswith("test_2018_flickr.cs.gz")
    assert len(read_lines(path)) == 1071
    multi30k_file("test_2018_flickr", "cs", None, tmp_path / "cache")
    assert len(urls) == 1, "the second lookup uses the cache"


# --------------------------------------------------------------------------- load_corpus


# what every data option adds to its corpus by default: nothing, and the text as given
AS_GIVEN = {"src_lang": "src", "tgt_lang": "tgt", "text_form": "as_is",
            "extra_train": {"pairs": None, "pairs_langs": None, "src": None, "tgt": None}}  # fmt: skip


def test_load_corpus_files(toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    cfg = OmegaConf.create({
        "kind": "files", "train_src": str(toy_corpus.train_src), "train_tgt": str(toy_corpus.train_tgt),
        "valid_src": str(toy_corpus.valid_src), "valid_tgt": str(toy_corpus.valid_tgt),
        "test_src": None, "test_tgt": None, "cache_dir": str(tmp_path), **AS_GIVEN,
    })  # fmt: skip
    corpus = load_corpus(cfg)
    assert set(corpus) == {"train", "valid"}
    assert corpus["train"].pairs["src"] == toy_corpus.src_lines and len(corpus["valid"]) == 30
    assert corpus["train"].pairs.cache_files, "read from an Arrow file, not held in memory"
    cfg.test_src, cfg.test_tgt = str(toy_corpus.test_src), str(toy_corpus.test_tgt)
    assert set(load_corpus(cfg)) == {"train", "valid", "test"}


def test_load_corpus_synthetic() -> None:
    cfg = OmegaConf.create({"kind": "synthetic", "seed": 1, "words": 10, "min_words": 2, "max_words": 5, "train_size": 30,
                            "valid_size": 5, "test_size": 4, "cache_dir": "unused", **AS_GIVEN})  # fmt: skip
    corpus = load_corpus(cfg)
    assert {role: len(text) for role, text in corpus.items()} == {"train": 30, "valid": 5, "test": 4}


def test_load_corpus_unknown_kind() -> None:
    with pytest.raises(DataError, match="data.kind='wmt'"):
        load_corpus(OmegaConf.create({"kind": "wmt", "cache_dir": "data"}))


def test_checkpoints_before_data_kind_still_name_their_corpus() -> None:
    assert corpus_kind(OmegaConf.create({"name": "multi30k"})) == "multi30k"


# --------------------------------------------------------------------------- text files as Arrow


def test_pairs_from_files_converts_once_and_rereads_an_edited_file(tmp_path: Path, monkeypatch) -> None:
    src = write_lines(tmp_path / "a.de", ["eins", "zwei\x1bdrei", ""])
    tgt = write_lines(tmp_path / "a.en", ["one", "two three", "empty source"])
    first = pairs_from_files(src, tgt, tmp_path / "cache")
    assert first.pairs["src"] == ["eins", "zwei drei", ""], "the rules of read_lines: control characters to spaces"
    assert first.pairs["tgt"] == ["one", "two three", "empty source"]
    assert first.src_name == str(src)
    files = list((tmp_path / "cache" / "text").iterdir())
    assert len(files) == 1 and files[0].suffix == ".arrow"
    monkeypatch.setattr("nmt.data.corpora._write_pairs", lambda *a: pytest.fail("the cached Arrow file should be reused"))
    assert pairs_from_files(src, tgt, tmp_path / "cache").pairs["tgt"] == first.pairs["tgt"]
    monkeypatch.undo()
    write_lines(tgt, ["one", "two three", "changed"])
    os.utime(tgt, ns=(1, 1))  # a different modification time, whatever the clock's resolution
    assert pairs_from_files(src, tgt, tmp_path / "cache").pairs["tgt"][2] == "changed"


def test_pairs_from_files_streams_in_record_batches(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("nmt.data.corpora.ROWS_PER_RECORD_BATCH", 7)
    src = write_lines(tmp_path / "b.src", [f"s{i}" for i in range(30)])
    tgt = write_lines(tmp_path / "b.tgt", [f"t{i}" for i in range(30)])
    pairs = pairs_from_files(src, tgt, tmp_path).pairs
    assert pairs["src"] == [f"s{i}" for i in range(30)] and pairs["tgt"][29] == "t29"
    assert pairs.data.table.column("src").num_chunks == 5


@pytest.mark.parametrize("extra", ["src", "tgt"])
def test_pairs_from_files_refuses_different_line_counts(tmp_path: Path, monkeypatch, extra: str) -> None:
    monkeypatch.setattr("nmt.data.corpora.ROWS_PER_RECORD_BATCH", 4)
    src = write_lines(tmp_path / "c.src", ["x"] * (11 if extra == "src" else 10))
    tgt = write_lines(tmp_path / "c.tgt", ["y"] * (11 if extra == "tgt" else 10))
    counts = (11, 10) if extra == "src" else (10, 11)
    with pytest.raises(DataError, match=f"c.src has {counts[0]} lines, .*c.tgt has {counts[1]} lines"):
        pairs_from_files(src, tgt, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "text").iterdir()), "no partial Arrow file is left"


def test_pairs_from_files_names_the_line_with_invalid_utf8(tmp_path: Path) -> None:
    src = tmp_path / "d.src"
    src.write_bytes(b"gut\nschlecht \xff\n")
    tgt = write_lines(tmp_path / "d.tgt", ["good", "bad"])
    with pytest.raises(DataError, match="d.src, line 2: invalid UTF-8"):
        pairs_from_files(src, tgt, tmp_path)


def test_content_key_follows_the_text_not_the_storage(tmp_path: Path) -> None:
    src, tgt = ["a b", "c", "d e f"], ["A B", "C", "D E F"]
    in_memory = datasets.Dataset.from_dict({"src": src, "tgt": tgt})
    on_disk = pairs_from_files(write_lines(tmp_path / "x.src", src), write_lines(tmp_path / "x.tgt", tgt), tmp_path).pairs
    assert content_key(in_memory) == content_key(on_disk)
    # the same characters split differently into lines, a changed line, a selected view
    assert content_key(datasets.Dataset.from_dict({"src": ["a bc", "", "d e f"], "tgt": tgt})) != content_key(on_disk)
    assert content_key(datasets.Dataset.from_dict({"src": src, "tgt": ["A B", "C", "D E G"]})) != content_key(on_disk)
    two = datasets.Dataset.from_dict({"src": src[1:], "tgt": tgt[1:]})
    assert content_key(on_disk.select([1, 2])) == content_key(two)


def test_split_without_text_is_refused(tmp_path: Path) -> None:
    text = TextSplit(datasets.Dataset.from_dict({"src": ["", "a"], "tgt": ["  ", ""]}), "e.src", "e.tgt")
    with pytest.raises(DataError, match="the train split e.src / e.tgt have 2 lines but none with text on both sides"):
        check_has_text(text, "train")


def test_arrow_batches_read_exactly_the_datasets_rows(tmp_path: Path, monkeypatch) -> None:
    """From the files themselves when the dataset is all of them, else through the dataset: a
    selection or a slice of the same file gives only its own rows."""
    monkeypatch.setattr("nmt.data.corpora.ROWS_PER_RECORD_BATCH", 4)
    src = write_lines(tmp_path / "f.src", [f"s{i}" for i in range(10)])
    tgt = write_lines(tmp_path / "f.tgt", [f"t{i}" for i in range(10)])
    pairs = pairs_from_files(src, tgt, tmp_path / "cache").pairs
    rows = lambda d, n=3: [x for t in arrow_batches(d, ["tgt"], batch_size=n) for x in t.column("tgt").to_pylist()]  # noqa: E731
    assert rows(pairs) == [f"t{i}" for i in range(10)]
    assert rows(pairs.select([7, 2, 5])) == ["t7", "t2", "t5"]
    assert rows(pairs.select(range(3, 6))) == ["t3", "t4", "t5"]
    assert rows(datasets.Dataset.from_dict({"tgt": ["a", "b"]})) == ["a", "b"]
    assert all(t.num_rows <= 3 for t in arrow_batches(pairs, ["src", "tgt"], batch_size=3))


# --------------------------------------------------------------------------- extra training pairs, text forms

EXTRA_SRC = ["Ana, bel!", "cor-dun eki"]
EXTRA_TGT = ["ZUP, YEX!", "WOB-VAK TIR"]


def _extra(tmp_path: Path, how: str) -> list[str]:
    """Overrides adding EXTRA_SRC/EXTRA_TGT as extra training pairs: a pairs file (``pairs``), one
    whose lines are target first (``swapped``), or two parallel files, one gzipped (``files``)."""
    if how == "pairs":
        path = write_lines(tmp_path / "extra.pairs", [f"{s} ||| {t}" for s, t in zip(EXTRA_SRC, EXTRA_TGT)])
        return [f"data.extra_train.pairs={path}"]
    if how == "swapped":
        path = write_lines(tmp_path / "extra.pairs", [f"{t} ||| {s}" for s, t in zip(EXTRA_SRC, EXTRA_TGT)])
        return [f"data.extra_train.pairs={path}", "data.extra_train.pairs_langs=[tgt,src]"]
    src, tgt = _write(tmp_path / "extra.src.gz", EXTRA_SRC, gz=True), write_lines(tmp_path / "extra.tgt", EXTRA_TGT)
    return [f"data.extra_train.src={src}", f"data.extra_train.tgt={tgt}"]


@pytest.mark.parametrize("how", ["pairs", "swapped", "files"])
def test_extra_pairs_follow_the_corpus_training_pairs_and_only_training(compose_cfg, toy_corpus: ToyCorpus,
                                                                        tmp_path: Path, how: str) -> None:  # fmt: skip
    plain = load_corpus(compose_cfg(*toy_corpus.overrides()).data)
    corpus = load_corpus(compose_cfg(*toy_corpus.overrides(), *_extra(tmp_path, how)).data)
    assert corpus["train"].pairs["src"] == toy_corpus.src_lines + EXTRA_SRC
    assert corpus["train"].pairs["tgt"] == toy_corpus.tgt_lines + EXTRA_TGT
    for role in ("valid", "test"):
        assert corpus[role].pairs.to_dict() == plain[role].pairs.to_dict(), role


def test_a_pairs_file_is_read_line_by_line_and_a_bad_line_named(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "x.pairs", ["a b ||| A B ", "no separator", "c ||| C"])
    with pytest.raises(DataError, match=r"x.pairs, line 2: expected 'source \|\|\| target'"):
        pairs_from_pairs_file(path, tmp_path / "cache")
    write_lines(path, ["a b ||| A B ", "  ||| x", "c ||| C"])
    assert pairs_from_pairs_file(path, tmp_path / "cache").pairs.to_dict() == {"src": ["a b", "", "c"],
                                                                               "tgt": ["A B", "x", "C"]}  # fmt: skip
    assert pairs_from_pairs_file(path, tmp_path / "cache", swap=True).pairs["src"] == ["A B", "x", "C"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"pairs": "p", "src": "s", "tgt": "t"}, "give a pairs file .* or two parallel files .* not both"),
    ({"src": "s"}, "data.extra_train.src and data.extra_train.tgt: give both files or neither"),
    ({"pairs": "p", "pairs_langs": ["en", "de"]}, r"pairs_langs=\['en', 'de'\]: .* \[en, fr\] or \[fr, en\]"),
])  # fmt: skip
def test_extra_train_settings_that_do_not_fit_are_refused(settings: dict, message: str) -> None:
    values = {"src": None, "tgt": None, "pairs": None, "pairs_langs": None, **settings}
    with pytest.raises(DataError, match=message):
        check_extra_train(values["src"], values["tgt"], values["pairs"], values["pairs_langs"], "en", "fr")
    assert check_extra_train(None, None, "p", ["fr", "en"], "en", "fr"), "the run's languages swapped: swap the sides"
    assert not check_extra_train(None, None, "p", None, "en", "fr")


def test_the_training_checks_name_a_missing_extra_file(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    cfg = compose_cfg(*toy_corpus.overrides(), f"data.extra_train.pairs={tmp_path / 'absent.pairs'}")
    with pytest.raises(ConfigError, match=r"data.extra_train.pairs=.*absent.pairs: no such file"):
        validate_config(cfg)
    with pytest.raises(ConfigError, match="data.text_form='lower': choose one of as_is, lowercase_tokenized"):
        validate_config(compose_cfg(*toy_corpus.overrides(), "data.text_form=lower"))


def test_the_training_checks_refuse_a_repeat_that_cannot_apply(compose_cfg, toy_corpus: ToyCorpus) -> None:
    with pytest.raises(ConfigError, match=r"data.extra_train.repeat=0: must be an integer >= 1"):
        validate_config(compose_cfg(*toy_corpus.overrides(), f"data.extra_train.pairs={toy_corpus.train_src}",
                                    "data.extra_train.repeat=0"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.extra_train.repeat=5 without extra pairs: name them"):
        validate_config(compose_cfg(*toy_corpus.overrides(), "data.extra_train.repeat=5"))


def test_the_text_form_applies_to_every_split_and_makes_its_own_cache(compose_cfg, toy_corpus: ToyCorpus,
                                                                      tmp_path: Path, monkeypatch) -> None:  # fmt: skip
    overrides = [*toy_corpus.overrides(), *_extra(tmp_path, "pairs"), "data.src_lang=fr"]
    given = load_corpus(compose_cfg(*overrides).data)
    formed = load_corpus(compose_cfg(*overrides, "data.text_form=lowercase_tokenized").data)
    for role in ("train", "valid", "test"):  # the references too
        assert formed[role].pairs["src"] == [tokenize(s, "fr") for s in given[role].pairs["src"]], role
        assert formed[role].pairs["tgt"] == [tokenize(t) for t in given[role].pairs["tgt"]], role
        assert formed[role].pairs["tgt"] != given[role].pairs["tgt"], "the toy targets are upper-case"
        assert content_key(formed[role].pairs) != content_key(given[role].pairs), "subwords and ids are keyed by the text"
    assert formed["train"].pairs["src"][-2:] == ["ana , bel !", "cor - dun eki"]
    assert formed["train"].pairs["tgt"][-2:] == ["zup , yex !", "wob - vak tir"]
    made = set((tmp_path / "cache" / "text").iterdir())
    monkeypatch.setattr("nmt.data.corpora._write_columns", lambda *a: pytest.fail("the cached text should be reused"))
    again = load_corpus(compose_cfg(*overrides, "data.text_form=lowercase_tokenized").data)
    assert again["train"].pairs["tgt"] == formed["train"].pairs["tgt"]
    monkeypatch.undo()
    monkeypatch.setattr("nmt.data.corpora.TEXT_FORM_VERSION", 99)  # the rules changed: the text is made again
    load_corpus(compose_cfg(*overrides, "data.text_form=lowercase_tokenized").data)
    assert len(set((tmp_path / "cache" / "text").iterdir()) - made) == 3, "one new file a split"


def test_a_synthetic_corpus_in_another_form_stays_in_memory(compose_cfg) -> None:
    cfg = compose_cfg("data=synthetic", "data.train_size=20", "data.valid_size=3", "data.test_size=2",
                      "data.text_form=lowercase_tokenized")  # fmt: skip
    corpus = load_corpus(cfg.data)
    assert not corpus["train"].pairs.cache_files and len(corpus["train"]) == 20
