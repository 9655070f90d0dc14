"""Shared fixtures: a toy parallel corpus written to a temporary folder, a tiny sentencepiece
vocabulary trained on it, a Hydra config composer whose outputs go to ``tmp_path``, and a builder of
tiny models for every encoder/attention/decoder combination.

Tests never touch the network: ``urllib.request.urlopen`` is replaced for every test.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import nmt.configs  # noqa: F401 (registers the schemas that configs/ names)
from nmt.data.subwords import VocabSettings, train_sentencepiece
from nmt.model import Seq2Seq, build_model
from nmt.vocab import PAD_ID, Vocab

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"  # nmt.configs (imported above: it registers the config schemas)

ATTENTIONS = ["bahdanau", "luong_dot", "luong_general", "scaled_dot", "none"]
# (config option, overrides): the Luong decoder with and without input feeding
DECODERS = {
    "bahdanau": ["model/decoder=bahdanau"],
    "luong_feed": ["model/decoder=luong", "model.decoder.input_feeding=true"],
    "luong_nofeed": ["model/decoder=luong", "model.decoder.input_feeding=false"],
}
# Encoder output (2 x 16) equals the decoder state (32) so that luong_dot fits every combination.
TINY_MODEL = [
    "model.emb_dim=16",
    "model.dropout=0.1",
    "model.encoder.hidden_dim=16",
    "model.decoder.hidden_dim=32",
    "model.decoder.output_dim=24",
]
SRC_VOCAB_SIZE, TGT_VOCAB_SIZE = 23, 29

# Under pytest-xdist (`-n auto`, as pyproject sets) each worker has a core of its own: torch's pool of
# one thread per core in every worker would oversubscribe the machine and make tiny models crawl.
# The commands the tests run as subprocesses inherit the variable.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


# --------------------------------------------------------------------------- no network


# The modules whose tests take longest (`pytest -m "slow or not slow" --durations=20`: the synthetic
# study trains two models, the notebook three, the wheel is built and installed). With `--dist
# loadscope` a module runs whole on one worker, so these go out first and the other worker takes
# the rest meanwhile, instead of one of them starting last and running alone at the end.
LONGEST_MODULES = ("test_study.py", "test_tutorial.py", "test_install.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the modules for the workers: :data:`LONGEST_MODULES` first, then the others by their
    number of tests, most first (xdist's own order, which ``--no-loadscope-reorder`` turns off so
    that this one holds). A module's tests keep their order."""
    size = Counter(item.path for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        name = item.path.name
        first = LONGEST_MODULES.index(name) if name in LONGEST_MODULES else len(LONGEST_MODULES)
        return first, -size[item.path], str(item.path)

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to download fails at once, as it would offline."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("network access is disabled in the tests")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.delenv("NMT_MULTI30K_DIR", raising=False)


# --------------------------------------------------------------------------- toy corpus

SRC_WORDS = ["ana", "bel", "cor", "dun", "eki", "fot", "gal", "hum", "ivo", "jar", "kel", "lom"]
TGT_WORDS = ["ZUP", "YEX", "WOB", "VAK", "TIR", "SUL", "RAN", "QOD", "POF", "NIG", "MEH", "LAZ"]
DICTIONARY = dict(zip(SRC_WORDS, TGT_WORDS))


def toy_pairs(count: int, seed: int, min_words: int = 2, max_words: int = 6) -> tuple[list[str], list[str]]:
    """A deterministic "translation": every source word has one target word, order kept."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for length in rng.integers(min_words, max_words + 1, size=count):
        words = [str(w) for w in rng.choice(SRC_WORDS, size=int(length))]
        src.append(" ".join(words))
        tgt.append(" ".join(DICTIONARY[w] for w in words))
    return src, tgt


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@dataclass
class ToyCorpus:
    """Paths of a toy corpus (train/valid/test, src/tgt) and the training text."""

    folder: Path
    train_src: Path
    train_tgt: Path
    valid_src: Path
    valid_tgt: Path
    test_src: Path
    test_tgt: Path
    src_lines: list[str]
    tgt_lines: list[str]

    def overrides(self) -> list[str]:
        """``data=files`` overrides that point a config at this corpus."""
        return [
            "data=files",
            f"data.train_src={self.train_src}",
            f"data.train_tgt={self.train_tgt}",
            f"data.valid_src={self.valid_src}",
            f"data.valid_tgt={self.valid_tgt}",
            f"data.test_src={self.test_src}",
            f"data.test_tgt={self.test_tgt}",
        ]


def make_toy_corpus(folder: Path, train_size: int = 400, valid_size: int = 30, test_size: int = 30) -> ToyCorpus:
    paths = {}
    for offset, (split, size) in enumerate((("train", train_size), ("valid", valid_size), ("test", test_size))):
        src, tgt = toy_pairs(size, seed=100 + offset)
        paths[f"{split}_src"] = write_lines(folder / f"{split}.src", src)
        paths[f"{split}_tgt"] = write_lines(folder / f"{split}.tgt", tgt)
        if split == "train":
            train_src, train_tgt = src, tgt
    return ToyCorpus(folder=folder, src_lines=train_src, tgt_lines=train_tgt, **paths)


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory: pytest.TempPathFactory) -> ToyCorpus:
    """400 training pairs, 30 validation and 30 test pairs of the toy language pair (read-only)."""
    return make_toy_corpus(tmp_path_factory.mktemp("toy_corpus"))


@pytest.fixture(scope="session")
def tiny_vocab(toy_corpus: ToyCorpus) -> Vocab:
    """A joint unigram sentencepiece model of ~60 pieces trained on the toy corpus."""
    settings = VocabSettings(type="unigram", size=60, joint=True, character_coverage=1.0)
    return Vocab(train_sentencepiece(toy_corpus.src_lines + toy_corpus.tgt_lines, settings))


# --------------------------------------------------------------------------- configs and models


@pytest.fixture
def compose_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """``compose_cfg(*overrides)``: the composed ``train`` config, caches and outputs in ``tmp_path``."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("train", overrides=[f"data.cache_dir={tmp_path / 'cache'}", *overrides])

    return _compose


@functools.cache
def compose_tiny_cfg(attention: str, decoder: str, encoder: str = "bigru") -> DictConfig:
    """The whole ``train`` config of a tiny model (sizes in ``TINY_MODEL``); cached, so never modify it."""
    tiny = TINY_MODEL
    if encoder == "transformer":  # a 2-layer, 2-head Transformer encoder in place of the bi-GRU
        tiny = [o for o in TINY_MODEL if not o.startswith("model.encoder.")]
        tiny += ["model.encoder.d_model=32", "model.encoder.num_layers=2", "model.encoder.num_heads=2",
                 "model.encoder.ff_dim=32"]  # output 32 = the decoder state, as luong_dot needs
    overrides = [f"model/encoder={encoder}", f"model/attention={attention}", *DECODERS[decoder], *tiny]
    if encoder == "gru":
        overrides.append("model.encoder.hidden_dim=32")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides)


@functools.cache
def compose_model_cfg(attention: str, decoder: str, encoder: str = "bigru", extra: tuple[str, ...] = ()) -> DictConfig:
    """The ``model`` node of a tiny model; cached, so never modify it.

    ``extra`` holds ``key=value`` overrides of existing values (not of config groups), applied to a copy
    of :func:`compose_tiny_cfg` rather than composed again (composing is the slow part of building a
    tiny model); an override of a key the config lacks is an error, as it is for Hydra."""
    config = copy.deepcopy(compose_tiny_cfg(attention, decoder, encoder))
    for override in extra:
        key, value = override.split("=", 1)
        absent = object()  # a key may hold None; only one the config lacks is refused
        assert OmegaConf.select(config, key, default=absent) is not absent, f"{key} is not a key of the composed config"
        OmegaConf.update(config, key, yaml.safe_load(value), merge=False)
    return config.model


def build_tiny_model(
    attention: str, decoder: str, encoder: str = "bigru", extra: tuple[str, ...] = (), seed: int = 0
) -> Seq2Seq:
    """A tiny ``Seq2Seq`` (vocabularies 23/29) in eval mode, initialised from ``seed``."""
    torch.manual_seed(seed)
    model = build_model(compose_model_cfg(attention, decoder, encoder, extra), SRC_VOCAB_SIZE, TGT_VOCAB_SIZE)
    return model.eval()


@pytest.fixture
def tiny_model() -> Callable[..., Seq2Seq]:
    """``tiny_model(attention, decoder, encoder="bigru")``: see :func:`build_tiny_model`."""
    return build_tiny_model


def random_batch(
    lengths: list[int], tgt_len: int, seed: int = 0, extra_pad: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random source ids padded to ``max(lengths) + extra_pad`` and a random decoder input (BOS first).

    :return: src (B, S) long, src_lens (B,) long, tgt_in (B, T) long.
    """
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths) + extra_pad
    src = torch.full((len(lengths), width), PAD_ID, dtype=torch.long)
    for row, length in enumerate(lengths):
        src[row, :length] = torch.randint(4, SRC_VOCAB_SIZE, (length,), generator=gen)
    tgt_in = torch.randint(4, TGT_VOCAB_SIZE, (len(lengths), tgt_len), generator=gen)
    tgt_in[:, 0] = 2  # BOS
    return src, torch.tensor(lengths, dtype=torch.long), tgt_in


# --------------------------------------------------------------------------- a trained model


@dataclass
class SmokeRun:
    """A finished ``experiment=smoke`` run (read-only): its folder (``checkpoints/best.pt`` and
    ``step*.pt``), and the sources and references of its synthetic test split."""

    folder: Path
    checkpoint: Path
    test_src: list[str]
    test_tgt: list[str]


def train_smoke_run(folder: Path, *overrides: str, experiment: str = "smoke") -> SmokeRun:
    """A small ``experiment`` (``smoke`` or ``smoke_transformer``) with ``overrides``, trained
    in-process into ``folder / "run"``, with its cache beside it."""
    from nmt.data.corpora import load_corpus
    from nmt.train import train

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", f"data.cache_dir={folder / 'cache'}",
                                          "train.device=cpu", *overrides])  # fmt: skip
    with process_restored():
        train(cfg, folder / "run")
    test = load_corpus(cfg.data)["test"].to_text()
    return SmokeRun(folder / "run", folder / "run" / "checkpoints" / "best.pt", test.src, test.tgt)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """``experiment=smoke`` trained once per session, in-process (~15 s on two cores)."""
    return train_smoke_run(tmp_path_factory.mktemp("smoke_run"), "train.num_heatmaps=0")


@contextlib.contextmanager
def process_restored() -> Iterator[None]:
    """``train``/``translate`` add handlers to the root logger, set its level and torch's threads:
    inside, they may; on leaving, all three are as they were."""
    root = logging.getLogger()
    before, level, threads = list(root.handlers), root.level, torch.get_num_threads()
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)
        torch.set_num_threads(threads)


def train_in_process(overrides: list[str], run: Path) -> dict[str, float]:
    """``nmt.train.train`` of the composed ``overrides`` into ``run``, as the command line runs it."""
    from nmt.train import train

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with process_restored():
        return train(cfg, run)


@pytest.fixture
def in_process():
    """The test may train or translate in this process (see :func:`process_restored`)."""
    with process_restored():
        yield


@contextlib.contextmanager
def serving(explorer, host: str = "127.0.0.1", **options) -> Iterator:
    """The explorer (``nmt.demo.make_server(explorer, host, 0, **options)``) serving in a thread
    until the block ends; yields the server (its port: ``server_address[1]``)."""
    import threading

    from nmt.demo import make_server

    httpd = make_server(explorer, host, 0, **options)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
