"""Any Hugging Face translation dataset by name (``data=hf``): a dataset on the hub (``wmt14``,
``iwslt2017``, ``opus_books``), a ``datasets`` builder over local files (``parquet``, ``json``,
``csv``, ``arrow``, with ``data.data_files``), or a folder written by ``save_to_disk``.

Two layouts are read, the two the hub uses:

    translation column (wmt14, iwslt2017)      two text columns (data.src_column, data.tgt_column)
    {"translation": {"de": "...", "en": "..."}}  {"german": "...", "english": "..."}

Either way a split becomes a :class:`nmt.data.text.TextSplit` with the columns ``src`` and ``tgt``, made
with ``Dataset.map`` on Arrow tables (no Python strings) and cached by ``datasets`` beside the
dataset, so a second run starts from the cache. Offline, ``datasets`` uses its cache as usual.

Rows whose source or target is missing (null) or not a string are counted: training drops them with
a warning, an evaluation split refuses them (a score over part of a test set is not that test set's
score).
"""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import OmegaConf

from nmt.data.text import DataError, TextSplit, worker_processes

log = logging.getLogger(__name__)

ROLES = ("train", "valid", "test")
_STRING_TYPES = (pa.string(), pa.large_string())


def hub_roles(data_cfg) -> dict[str, str]:
    """The dataset's split for each role a run uses: ``{"train": "train", "valid": "validation", ...}``;
    a role whose split is null is left out (only ``test`` may be)."""
    splits = data_cfg.splits
    return {role: str(splits[role]) for role in ROLES if splits.get(role) is not None}


def load_hub_splits(data_cfg, roles: dict[str, str] | None = None) -> dict[str, TextSplit]:
    """The splits of ``data_cfg`` (the ``data`` node of ``data=hf``) as ``src``/``tgt`` pairs, by role.

    :param roles: role -> the dataset's split name; default :func:`hub_roles`.
    :raise DataError: one line for an unknown dataset or config, no network and no cache, a missing
        split, language or column, or an evaluation split with missing or non-string sides.
    """
    roles = hub_roles(data_cfg) if roles is None else roles
    loaded = open_dataset(data_cfg)
    out = {}
    for role, split in roles.items():
        if split not in loaded:
            raise DataError(
                f"data.splits.{role}={split!r}: {_describe(data_cfg)} has the splits {', '.join(loaded)}; "
                f"set data.splits.{role} to one of them"
            )
        out[role] = to_pairs(loaded[split], data_cfg, split, training=role == "train")
    return out


def open_dataset(data_cfg) -> datasets.DatasetDict:
    """Load ``data.path`` (with ``data.name`` and ``data.data_files``) as a ``DatasetDict`` of splits."""
    path = str(data_cfg.path)
    folder = Path(path)
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():  # save_to_disk
        loaded = datasets.load_from_disk(path)
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    files = data_cfg.get("data_files")
    files = OmegaConf.to_container(files) if OmegaConf.is_config(files) else files
    if isinstance(files, dict):
        files = {split: f for split, f in files.items() if f is not None}
    try:
        return datasets.load_dataset(path, data_cfg.get("name"), data_files=files or None,
                                     cache_dir=data_cfg.get("hf_cache_dir"))  # fmt: skip
    except datasets.exceptions.DatasetNotFoundError as e:
        raise DataError(
            f"data.path={path!r}: no such dataset: not a local folder, not a builder (parquet, json, csv, arrow, "
            f"text) and not a dataset on the Hugging Face hub, or a gated one ({_first_line(e)})"
        ) from None
    except ConnectionError as e:  # includes the hub client's offline errors
        raise DataError(
            f"data.path={path!r}: not in the datasets cache and the Hugging Face hub cannot be reached "
            f"({_first_line(e)}); connect once to download it, or train from local files "
            "(data.path=parquet data.data_files.train=...)"
        ) from None
    except FileNotFoundError as e:
        raise DataError(f"{_describe(data_cfg)}: {_first_line(e)}; check data.path and data.data_files") from None
    except ValueError as e:
        key = "data.name" if "config" in str(e).lower() else "data.path"
        raise DataError(f"{key}: {_describe(data_cfg)}: {_first_line(e)}") from None


def to_pairs(dataset: datasets.Dataset, data_cfg, split: str, training: bool) -> TextSplit:
    """One split of either layout as the string columns ``src``, ``tgt`` (missing sides as "")."""
    src_col, tgt_col = data_cfg.get("src_column"), data_cfg.get("tgt_column")
    src_lang, tgt_lang = str(data_cfg.src_lang), str(data_cfg.tgt_lang)
    where = f"{_describe(data_cfg)}, split {split!r}"
    if (src_col is None) != (tgt_col is None):
        raise DataError("data.src_column and data.tgt_column: give both (two text columns) or neither (translation column)")
    if src_col is not None:
        for key, column in (("data.src_column", src_col), ("data.tgt_column", tgt_col)):
            if column not in dataset.column_names:
                raise DataError(f"{key}={column!r}: {where} has the columns {', '.join(dataset.column_names)}")
        fields = (str(src_col), None), (str(tgt_col), None)
        names = f"{src_col}", f"{tgt_col}"
    else:
        if "translation" not in dataset.column_names:
            raise DataError(
                f"{where} has no 'translation' column (it has {', '.join(dataset.column_names)}); name its two text "
                "columns with data.src_column=... data.tgt_column=..."
            )
        langs = _languages(dataset.features["translation"], where)
        for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
            if lang not in langs:
                raise DataError(f"{key}={lang!r}: the translation column of {where} has the languages {', '.join(langs)}")
        fields = ("translation", src_lang), ("translation", tgt_lang)
        names = f"translation.{src_lang}", f"translation.{tgt_lang}"
    features = {"src": datasets.Value("string"), "tgt": datasets.Value("string"), "complete": datasets.Value("bool")}
    pairs = dataset.with_format("arrow").map(
        _select_sides,
        batched=True,
        batch_size=10_000,
        fn_kwargs={"fields": fields},
        remove_columns=dataset.column_names,
        features=datasets.Features(features),
        num_proc=worker_processes(int(data_cfg.get("num_proc") or 1), len(dataset)),
        desc=f"{split}: source and target columns",
    ).with_format(None)
    complete = pairs.data.column("complete").to_numpy()
    bad = int((~complete).sum())
    if bad and not training:
        first = int((~complete).argmax())
        raise DataError(
            f"{where}: {bad} of {len(pairs)} rows have a missing or non-string {names[0]} or {names[1]} (the first is "
            f"row {first}); an evaluation split must be complete: fix or drop those rows"
        )
    if bad:
        log.warning("%s: %d of %d rows have a missing or non-string side; training drops them", where, bad, len(pairs))
    label = f"hf:{data_cfg.path}" + (f"/{data_cfg.get('name')}" if data_cfg.get("name") else "")
    return TextSplit(pairs.remove_columns("complete"), f"<{label}:{split}.{names[0]}>", f"<{label}:{split}.{names[1]}>")


def _select_sides(table: pa.Table, fields) -> pa.Table:
    """Arrow in, Arrow out: the two sides as strings ("" where missing or not a string) and a flag."""
    sides, complete = [], pa.array([True] * len(table))
    for column, lang in fields:
        values = table.column(column).combine_chunks()
        if lang is not None:
            values = pc.struct_field(values, lang)  # null where the whole mapping is null
        if values.type in _STRING_TYPES:
            ok = values.is_valid()
            values = values.fill_null("").cast(pa.string())
        else:  # numbers, lists...: not text
            ok = pa.array([False] * len(table))
            values = pa.array([""] * len(table), pa.string())
        sides.append(values)
        complete = pc.and_(complete, ok)
    return pa.table({"src": sides[0], "tgt": sides[1], "complete": complete})


def _languages(feature, where: str) -> list[str]:
    """The languages of a translation column: ``Translation(languages=[...])`` or a struct of strings."""
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    if isinstance(feature, dict):
        return list(feature)
    raise DataError(f"the 'translation' column of {where} is not a {{language: text}} mapping ({feature})")


def _describe(data_cfg) -> str:
    name = data_cfg.get("name")
    return f"dataset {data_cfg.path}" + (f" (config {name})" if name else "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
