"""``data=hf``: Hugging Face datasets built on disk here (parquet, json lines, ``save_to_disk``) in
both layouts (a ``translation`` column, two text columns) are read, trained on and evaluated; bad
datasets, splits, languages, columns and rows are refused with one line; no test touches the
network (the hub is put in offline mode)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import datasets
import huggingface_hub
import pytest
from conftest import REPO_ROOT, ToyCorpus
from omegaconf import OmegaConf

from nmt.data.batches import prepare_data, subset
from nmt.data.hub import load_hub_splits
from nmt.data.text import DataError
from nmt.errors import ConfigError
from nmt.evaluate import split_text
from nmt.train import train

TOY_VOCAB = ["data.vocab.joint=false", "data.vocab.size=40"]
SPLITS = {"train": "train", "validation": "valid", "test": "test"}  # hub split name -> toy corpus part


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hugging Face hub is unreachable, as on a machine without network: datasets fails at once."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def _toy_texts(corpus: ToyCorpus, part: str) -> tuple[list[str], list[str]]:
    if part == "train":
        return corpus.src_lines, corpus.tgt_lines
    folder = corpus.folder
    read = lambda p: p.read_text(encoding="utf-8").splitlines()  # noqa: E731
    return read(folder / f"{part}.src"), read(folder / f"{part}.tgt")


def _toy_dataset(corpus: ToyCorpus, layout: str) -> datasets.DatasetDict:
    """The toy corpus as a DatasetDict: ``translation`` {"xx": ..., "yy": ...} or columns ``source``/``target``."""
    splits = {}
    for split, part in SPLITS.items():
        src, tgt = _toy_texts(corpus, part)
        if layout == "translation":
            rows = {"translation": [{"xx": s, "yy": t} for s, t in zip(src, tgt)], "id": list(range(len(src)))}
        else:
            rows = {"source": src, "target": tgt}
        splits[split] = datasets.Dataset.from_dict(rows)
    return datasets.DatasetDict(splits)


def _layout_overrides(layout: str) -> list[str]:
    if layout == "translation":
        return ["data.src_lang=xx", "data.tgt_lang=yy"]
    return ["data.src_column=source", "data.tgt_column=target"]


def _on_disk(corpus: ToyCorpus, layout: str, fmt: str, folder: Path) -> list[str]:
    """Write the toy dataset in ``fmt`` under ``folder``; return the ``data=hf`` overrides that read it."""
    dataset = _toy_dataset(corpus, layout)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "save_to_disk":
        dataset.save_to_disk(str(folder / "saved"))
        return ["data=hf", f"data.path={folder / 'saved'}", *_layout_overrides(layout)]
    overrides = ["data=hf", f"data.path={fmt}", *_layout_overrides(layout)]
    for split, part in dataset.items():
        path = folder / f"{split}.{fmt}"
        part.to_parquet(str(path)) if fmt == "parquet" else part.to_json(str(path), lines=True)
        overrides.append(f"data.data_files.{split}={path}")
    return overrides


def _cfg(compose_cfg, *overrides: str):
    return compose_cfg("experiment=smoke", *overrides, *TOY_VOCAB, "data.max_tokens=200", "train.num_heatmaps=0")


# --------------------------------------------------------------------------- reading both layouts


LAYOUTS = [("translation", "parquet"), ("columns", "json"), ("translation", "save_to_disk"), ("columns", "parquet")]


@pytest.mark.parametrize(("layout", "fmt"), LAYOUTS)
def test_both_layouts_read_as_source_and_target(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path, layout, fmt) -> None:
    cfg = _cfg(compose_cfg, *_on_disk(toy_corpus, layout, fmt, tmp_path / "ds"))
    splits = load_hub_splits(cfg.data)
    assert set(splits) == {"train", "valid", "test"}
    assert splits["train"].pairs["src"] == toy_corpus.src_lines
    assert splits["train"].pairs["tgt"] == toy_corpus.tgt_lines
    assert (splits["valid"].pairs["src"], splits["valid"].pairs["tgt"]) == _toy_texts(toy_corpus, "valid")
    assert splits["train"].pairs.column_names == ["src", "tgt"]
    assert splits["train"].pairs.cache_files, "memory-mapped from an Arrow file"


@pytest.mark.parametrize(("layout", "fmt"), [("translation", "parquet"), ("columns", "parquet")])
def test_train_from_a_local_parquet_dataset(compose_cfg, toy_corpus, tmp_path: Path, in_process, layout, fmt) -> None:
    """A few updates from each layout, scored on the dataset's test split; nmt.evaluate then reads
    the test set the user names, never the dataset the checkpoint names."""
    overrides = _on_disk(toy_corpus, layout, fmt, tmp_path / "ds")
    results = train(_cfg(compose_cfg, *overrides, "train.max_steps=4", "train.eval_every=4"), tmp_path / "run")
    assert results["steps"] == 4.0 and "test_bleu" in results
    assert len((tmp_path / "run" / "hypotheses" / "test.txt").read_text().splitlines()) == 30
    config = OmegaConf.create(json.loads(json.dumps(OmegaConf.to_container(_cfg(compose_cfg, *overrides)))))
    with pytest.raises(ConfigError, match=r"'hf' corpus.*give the test set as src=FILE ref=FILE"):
        split_text(config.data, "test", None)


def test_prepared_data_is_the_same_as_from_text_files(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    from_hub = prepare_data(_cfg(compose_cfg, *_on_disk(toy_corpus, "translation", "parquet", tmp_path / "ds")).data)
    from_files = prepare_data(_cfg(compose_cfg, *toy_corpus.overrides()).data)
    assert from_hub.src_vocab.sha256 == from_files.src_vocab.sha256, "the same text gives the same subword model"
    assert from_hub.train.src_lens.tolist() == from_files.train.src_lens.tolist()
    rows = list(range(20))
    assert from_hub.train.collate(rows).tgt_out.tolist() == from_files.train.collate(rows).tgt_out.tolist()


def test_max_train_pairs_takes_a_fixed_subset(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    overrides = _on_disk(toy_corpus, "columns", "parquet", tmp_path / "ds")
    first = prepare_data(_cfg(compose_cfg, *overrides, "data.max_train_pairs=100").data)
    again = prepare_data(_cfg(compose_cfg, *overrides, "data.max_train_pairs=100").data)
    assert len(first.train) == 100 and len(first.evaluation["valid"][0]) == 30, "only training is cut"
    assert first.train.src_lens.tolist() == again.train.src_lens.tolist()
    pairs = datasets.Dataset.from_dict({"src": [str(i) for i in range(1000)], "tgt": ["x"] * 1000})
    rows = [int(s) for s in subset(pairs, 50)["src"]]
    assert rows == sorted(rows) and len(set(rows)) == 50, "in corpus order, without repeats"
    assert rows != list(range(50)), "a random subset, not the first pairs"


# --------------------------------------------------------------------------- bad datasets


def _hub_cfg(compose_cfg, tmp_path: Path, *overrides: str):
    return _cfg(compose_cfg, *_on_disk_default(tmp_path), *overrides).data


def _on_disk_default(tmp_path: Path) -> list[str]:
    rows = {"translation": [{"de": "ein Hund", "en": "a dog"}, {"de": "zwei", "en": "two"}]}
    path = tmp_path / "train.parquet"
    if not path.exists():
        datasets.Dataset.from_dict(rows).to_parquet(str(path))
    return ["data=hf", "data.path=parquet", f"data.data_files.train={path}", f"data.data_files.validation={path}",
            "data.splits.test=null"]  # fmt: skip


def test_unknown_dataset_without_network_or_cache(compose_cfg, tmp_path: Path) -> None:
    data = _hub_cfg(compose_cfg, tmp_path, "data.path=surely-not-a-dataset-xyz", "data.name=de-en")
    with pytest.raises(DataError, match="data.path='surely-not-a-dataset-xyz': not in the datasets cache and the "
                                        "Hugging Face hub cannot be reached"):  # fmt: skip
        load_hub_splits(data)


def test_unknown_config_name_lists_the_configs(compose_cfg, tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    datasets.Dataset.from_dict({"translation": [{"de": "a", "en": "b"}]}).to_parquet(str(folder / "data" / "train.parquet"))
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: de-en\n  data_files:\n  - split: train\n"
                                      "    path: data/train.parquet\n---\n")  # fmt: skip
    data = _hub_cfg(compose_cfg, tmp_path, f"data.path={folder}", "data.name=fr-en", "data.splits.valid=train")
    data.data_files = None
    with pytest.raises(DataError, match=r"data.name: .*'fr-en' not found. Available: \['de-en'\]"):
        load_hub_splits(data)


def test_missing_data_file_is_named(compose_cfg, tmp_path: Path) -> None:
    data = _hub_cfg(compose_cfg, tmp_path, f"data.data_files.validation={tmp_path / 'nope.parquet'}")
    with pytest.raises(DataError, match="nope.parquet"):
        load_hub_splits(data)


def test_missing_split_lists_the_splits(compose_cfg, tmp_path: Path) -> None:
    data = _hub_cfg(compose_cfg, tmp_path, "data.splits.valid=dev")
    with pytest.raises(DataError, match="data.splits.valid='dev': dataset parquet has the splits train, validation"):
        load_hub_splits(data)


def test_missing_language_lists_the_languages(compose_cfg, tmp_path: Path) -> None:
    data = _hub_cfg(compose_cfg, tmp_path, "data.tgt_lang=fr")
    with pytest.raises(DataError, match="data.tgt_lang='fr': the translation column of .* has the languages de, en"):
        load_hub_splits(data)


def test_missing_column_lists_the_columns(compose_cfg, tmp_path: Path) -> None:
    data = _hub_cfg(compose_cfg, tmp_path, "data.src_column=german", "data.tgt_column=english")
    with pytest.raises(DataError, match="data.src_column='german': .* has the columns translation"):
        load_hub_splits(data)
    path = tmp_path / "cols.parquet"
    datasets.Dataset.from_dict({"german": ["a"], "english": ["b"]}).to_parquet(str(path))
    data = _hub_cfg(compose_cfg, tmp_path, f"data.data_files.train={path}", f"data.data_files.validation={path}")
    with pytest.raises(DataError, match="has no 'translation' column .* data.src_column=... data.tgt_column=..."):
        load_hub_splits(data)


def test_incomplete_rows_are_dropped_in_training_and_refused_in_evaluation(compose_cfg, tmp_path: Path, caplog) -> None:
    path = tmp_path / "holes.parquet"
    rows = {"de": ["ein Hund", None, "drei", "vier"], "en": ["a dog", "two", None, "four"], "n": [1, 2, 3, 4]}
    datasets.Dataset.from_dict(rows).to_parquet(str(path))
    good = tmp_path / "good.parquet"
    datasets.Dataset.from_dict({"de": ["eins"], "en": ["one"], "n": [1]}).to_parquet(str(good))
    columns = ["data.src_column=de", "data.tgt_column=en", f"data.data_files.train={path}"]
    data = _hub_cfg(compose_cfg, tmp_path, *columns, f"data.data_files.validation={good}")
    with caplog.at_level(logging.WARNING):
        train_split = load_hub_splits(data)["train"]
    assert train_split.pairs["src"] == ["ein Hund", "", "drei", "vier"], "kept as empty sides, which training drops"
    assert "2 of 4 rows have a missing or non-string side; training drops them" in caplog.text
    data = _hub_cfg(compose_cfg, tmp_path, *columns, f"data.data_files.validation={path}")
    with pytest.raises(DataError, match="2 of 4 rows have a missing or non-string de or en .*row 1.*must be complete"):
        load_hub_splits(data)
    numbers = _hub_cfg(compose_cfg, tmp_path, "data.src_column=n", "data.tgt_column=en", f"data.data_files.train={good}",
                       f"data.data_files.validation={good}")  # fmt: skip
    with pytest.raises(DataError, match="1 of 1 rows have a missing or non-string n or en"):
        load_hub_splits(numbers)


@pytest.mark.slow
def test_train_command_refuses_a_bad_dataset_with_one_line(tmp_path: Path) -> None:
    overrides = _on_disk_default(tmp_path)
    command = [sys.executable, "-m", "nmt.train", "experiment=smoke", *overrides, "data.src_lang=fr",
               f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and "Traceback" not in output, output[-3000:]
    assert len(errors) == 1 and "data.tgt_lang" not in errors[0], output[-3000:]
    expected = "data.src_lang='fr': the translation column of dataset parquet, split 'train' has the languages de, en"
    assert expected in errors[0]
