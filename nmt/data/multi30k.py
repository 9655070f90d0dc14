"""Multi30k task 1 (Elliott et al. 2016): image captions in English, German, French and Czech, one
sentence a line, in the splits of :data:`MULTI30K_SPLITS`. Its raw files are looked for, in order,
in ``data.dir`` (or ``$NMT_MULTI30K_DIR``), then in the download cache ``<data.cache_dir>/multi30k``,
and are otherwise downloaded from the official release into that cache and verified (checksum
where known, always the line count). :mod:`nmt.data.corpora` reads them like any other corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from nmt.data.text import DataError, ParallelText, read_parallel
from nmt.files import atomic_write_bytes

log = logging.getLogger(__name__)

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.gz"
MULTI30K_ENV = "NMT_MULTI30K_DIR"
MULTI30K_LANGS = ("en", "de", "fr", "cs")
# split -> (number of lines, languages the release has for it)
MULTI30K_SPLITS: dict[str, tuple[int, tuple[str, ...]]] = {
    "train": (29000, ("en", "de", "fr", "cs")),
    "val": (1014, ("en", "de", "fr", "cs")),
    "test_2016_flickr": (1000, ("en", "de", "fr", "cs")),
    "test_2017_flickr": (1000, ("en", "de", "fr")),
    "test_2017_mscoco": (461, ("en", "de", "fr")),
    "test_2018_flickr": (1071, ("en", "de", "fr", "cs")),
}
# sha256 of the official gzipped raw files, where we have seen them.
MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}


def check_multi30k_pair(src_lang: str, tgt_lang: str) -> None:
    for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
        if lang not in MULTI30K_LANGS:
            raise DataError(f"{key}={lang!r}: Multi30k has languages {', '.join(MULTI30K_LANGS)}")
    if src_lang == tgt_lang:
        raise DataError(f"data.src_lang and data.tgt_lang are both {src_lang!r}; choose two languages")


def _verify(name: str, data: bytes) -> None:
    split = name.split(".")[0]
    expected_lines = MULTI30K_SPLITS[split][0]
    digest = MULTI30K_SHA256.get(f"{name}.gz")
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise DataError(f"downloaded {name}.gz does not match its known sha256 checksum")
    lines = gzip.decompress(data).count(b"\n")
    if lines != expected_lines:
        raise DataError(f"downloaded {name}.gz has {lines} lines, expected {expected_lines}")


def multi30k_file(split: str, lang: str, local_dir: str | None, cache_dir: str | Path) -> Path:
    """Path of ``{split}.{lang}`` from the local folder, the cache, or a verified download."""
    if split not in MULTI30K_SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; choose from {', '.join(MULTI30K_SPLITS)}")
    if lang not in MULTI30K_SPLITS[split][1]:
        have = ", ".join(MULTI30K_SPLITS[split][1])
        raise DataError(f"Multi30k split {split} has no {lang!r} side (it has {have})")
    name = f"{split}.{lang}"
    local_dir = local_dir or os.environ.get(MULTI30K_ENV) or None
    folders = ([Path(local_dir)] if local_dir else []) + [Path(cache_dir) / "multi30k"]
    for folder in folders:
        for candidate in (folder / f"{name}.gz", folder / name):
            if candidate.is_file():
                return candidate
    if local_dir:
        raise DataError(
            f"data.dir={local_dir}: neither {name}.gz nor {name} is there; point data.dir at a folder "
            "holding the Multi30k task-1 raw files"
        )
    target = Path(cache_dir) / "multi30k" / f"{name}.gz"
    url = MULTI30K_URL.format(name=name)
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as e:
        raise DataError(
            f"cannot download Multi30k {name} ({e}). Offline? Put the raw files ({name}.gz, ...) in a "
            f"folder and run with data.dir=/path/to/folder (or export {MULTI30K_ENV}=/path/to/folder)"
        ) from None
    _verify(name, data)
    atomic_write_bytes(target, data)
    return target


def load_multi30k(
    src_lang: str, tgt_lang: str, splits: dict[str, str], local_dir: str | None, cache_dir: str | Path
) -> dict[str, ParallelText]:
    """The requested Multi30k splits, e.g. ``{"train": "train", "valid": "val"}``."""
    check_multi30k_pair(src_lang, tgt_lang)
    return {
        role: read_parallel(
            multi30k_file(split, src_lang, local_dir, cache_dir),
            multi30k_file(split, tgt_lang, local_dir, cache_dir),
        )
        for role, split in splits.items()
    }
