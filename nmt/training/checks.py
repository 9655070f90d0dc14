"""Start-up checks of a composed config: an invalid value fails before any data is read, with one
line naming the key, the value and what is accepted (:class:`ConfigError`).

Hydra already refuses unknown keys and group options while composing. What YAML cannot say is
checked here: sizes, probabilities, choices among strings, and paths that must exist. The model,
optimizer and scheduler are also built once on dummy sizes, so that a constructor's own check (e.g.
``luong_dot`` with mismatched sizes) fails now rather than after the data is prepared.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from nmt.data.corpora import check_extra_train
from nmt.data.guidance import GOLD, check_gold
from nmt.data.multi30k import MULTI30K_SPLITS, check_multi30k_pair
from nmt.data.subword_sampling import check_subword_sampling
from nmt.data.text import DataError
from nmt.errors import ConfigError, instantiation_message
from nmt.model import Seq2Seq, build_model, check_attention_fits
from nmt.search import SearchSettings, check_search_settings
from nmt.text_form import TEXT_FORMS

VOCAB_TYPES = ("unigram", "bpe")
NO_ATTENTION = "nmt.attention.NoAttention"
MIN_VOCAB_SIZE = 8  # the four special pieces and a few real ones
DATA_KINDS = ("multi30k", "files", "synthetic", "hf")
_ABSENT = object()


def validate_config(cfg: DictConfig) -> None:
    """Check a composed ``train`` config; the first problem found raises :class:`ConfigError`."""
    _check_model(cfg)
    _check_data(cfg)
    _check_train(cfg)
    _check_instantiation(cfg)


def check_search(cfg: DictConfig, prefix: str) -> None:
    """Check the decoding keys under ``prefix`` (``train.search``) with the rules of
    :func:`nmt.search.check_search_settings`, the one place they are written."""
    values = {f.name: value(cfg, f"{prefix}.{f.name}") for f in fields(SearchSettings)}
    try:
        check_search_settings(values["beam_size"], values["n_best"], values["length_penalty"], values["alpha"],
                              values["max_len_a"], values["max_len_b"], prefix=f"{prefix}.")  # fmt: skip
    except ValueError as e:
        raise ConfigError(str(e)) from None


# --------------------------------------------------------------------------- resuming

# Settings that say where or how fast a run ran, not what it learned (a run is the same run
# whatever they were: the study reuses a finished run that differs only in these).
INCIDENTAL = ("train.threads", "train.device", "train.resume", "train.overwrite", "train.decode_batch_size",
              "train.log_every", "train.keep_checkpoints", "train.num_heatmaps", "train.dist_backend", "data.dir",
              "data.cache_dir", "data.num_proc", "data.hf_cache_dir", "data.test_splits")  # fmt: skip
# What a resumed run may change: the incidental settings, and those read afresh at every update or
# validation (so the new value holds from the first update after the resume). Anything else
# shapes the model, the subwords, the data and its order, or the optimizer and schedule whose state
# comes from the checkpoint: a change there is refused rather than silently ignored.
RESUMABLE_TRAIN = tuple(k.split(".", 1)[1] for k in INCIDENTAL if k.startswith("train.")) + (
    "max_epochs", "max_steps", "patience", "eval_every", "val_beam_size", "search", "max_bad_steps", "clip_norm",
    "label_smoothing", "amp", "ema", "init_from")  # fmt: skip
# (data.subword_sampling is read as each batch is made)
RESUMABLE_DATA = tuple(k.split(".", 1)[1] for k in INCIDENTAL if k.startswith("data.")) + ("subword_sampling",)


def resumable(key: str) -> bool:
    """Whether the dotted config ``key`` may differ between a checkpoint and the run resuming it.
    Dropout rates (``*dropout``) may: the modules read them at every forward pass."""
    section, _, rest = key.partition(".")
    head = rest.split(".", 1)[0]
    if section == "model":
        return is_dropout(key)
    if key == "data.vocab.sample_size":  # a resumed run keeps its checkpoint's subword models
        return True
    if key in ("train.guided_alignment.weight", "train.guided_alignment.decay"):  # read at every update
        return True
    return (section == "train" and head in RESUMABLE_TRAIN) or (section == "data" and head in RESUMABLE_DATA)


def resume_changes(saved: dict, cfg: DictConfig, checkpoint: str | Path) -> list[str]:
    """Compare the config of the checkpoint being resumed with the new one.

    :param saved: the checkpoint's (resolved) config.
    :return: the changed settings that the resumed run applies, as ``key: old -> new``; the
        resume key itself is left out.
    :raise ConfigError: one line naming every other differing key with both values.
    """
    differ = differences(saved, cfg, ("model", "data", "train"))
    refused = [d for d in differ if not resumable(d.key)]
    if refused:
        raise ConfigError(
            f"cannot resume {checkpoint}: the config differs from the checkpoint's where it shapes the model, "
            f"subwords, data or optimizer: {_both_values(refused)}. Resume with the checkpoint's values, or start a "
            "new run in another folder (hydra.run.dir=...)"
        )
    return [f"{d.key}: {d.saved} -> {d.now}" for d in differ if d.key != "train.resume"]


def is_dropout(key: str) -> bool:
    """Whether the dotted model ``key`` is a dropout rate (``model.dropout``,
    ``model.decoder.attention_dropout``, ``model.tgt_word_dropout``...): the modules read it at
    every forward pass, so a run may change it from its checkpoint's."""
    return key.rsplit(".", 1)[-1].endswith("dropout")


def fits_weights(key: str) -> bool:
    """Whether the dotted config ``key`` may differ between a checkpoint and a new run that starts
    from its weights and subword models (``train.init_from``): any key but the model's classes,
    sizes and switches and the subword settings. Of those, the dropout rates and
    ``data.vocab.sample_size`` (how many sentences the subword models were trained on) may differ too."""
    if key.startswith("model."):
        return is_dropout(key)
    return not key.startswith("data.vocab.") or key == "data.vocab.sample_size"


def init_changes(saved: dict, cfg: DictConfig, checkpoint: str | Path) -> list[str]:
    """Compare the config of the checkpoint a new run starts from (``train.init_from``) with the
    new run's, where it shapes the weights and the subword models (:func:`fits_weights`).

    :param saved: the checkpoint's (resolved) config.
    :return: the model settings the new run changes (dropout rates), as ``key: old -> new``.
    :raise ConfigError: one line naming every key that must keep the checkpoint's value, with both
        values and the overrides that restore them.
    """
    differ = differences(saved, cfg, ("model", "data"))
    refused = [d for d in differ if not fits_weights(d.key)]
    if refused:
        restore = " ".join(f"{d.key}={_as_override(d.saved)}" for d in refused if d.saved != "(absent)")
        raise ConfigError(
            f"cannot start from {checkpoint}: the config differs from the checkpoint's where it shapes the weights or "
            f"the subword models: {_both_values(refused)}. Give the checkpoint's values"
            f"{f' ({restore})' if restore else ''}, or train from scratch without train.init_from"
        )
    return [f"{d.key}: {d.saved} -> {d.now}" for d in differ if d.key.startswith("model.")]


@dataclass(frozen=True)
class Difference:
    """A key whose value differs between a checkpoint's config and a new one, with both values as
    ``repr`` writes them (``(absent)`` where a config lacks the key)."""

    key: str
    saved: str
    now: str


def differences(saved: dict, cfg: DictConfig, sections: tuple[str, ...]) -> list[Difference]:
    """The keys under ``sections`` (e.g. ``("model", "data")``) whose values differ between the
    checkpoint's config ``saved`` (resolved) and ``cfg``, sorted."""
    old, new = flatten(saved), flatten(OmegaConf.to_container(cfg, resolve=True))
    differ = sorted(k for k in old.keys() | new.keys() if k.split(".")[0] in sections
                    and old.get(k, _ABSENT) != new.get(k, _ABSENT))  # fmt: skip
    show = lambda d, k: "(absent)" if k not in d else repr(d[k])  # noqa: E731
    return [Difference(k, show(old, k), show(new, k)) for k in differ]


def _both_values(refused: list[Difference]) -> str:
    return "; ".join(f"{d.key}: {d.saved} in the checkpoint, {d.now} now" for d in refused)


def _as_override(shown: str) -> str:
    """A value as ``repr`` wrote it, spelled as a command-line override (``True`` -> ``true``,
    ``'bpe'`` -> ``bpe``, ``None`` -> ``null``)."""
    spelled = {"True": "true", "False": "false", "None": "null"}
    if shown in spelled:
        return spelled[shown]
    return shown[1:-1] if len(shown) > 1 and shown[0] == shown[-1] == "'" else shown


def override_key(override: str) -> str:
    """The key (or ``group@package``) a command-line override sets: ``+a.b=1`` -> ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(saved: list[str], given: list[str]) -> list[str]:
    """The overrides of a continued run: the run's ``saved`` ones, less those whose key ``given``
    sets again, then ``given`` (``saved = [experiment=smoke, train.max_steps=50]`` and ``given =
    [train.max_steps=80]`` -> ``[experiment=smoke, train.max_steps=80]``). A key the run added
    (``+key=...``) stays added (``++key=...``)."""
    keys = {override_key(o) for o in given}
    added = {override_key(o) for o in saved if o.startswith("+") and override_key(o) in keys}
    kept = [o for o in saved if override_key(o) not in keys]
    return kept + [f"++{o.lstrip('+')}" if override_key(o) in added and not o.startswith("~") else o for o in given]


def continued_config(saved: dict, before: DictConfig, after: DictConfig) -> DictConfig:
    """The config of a run continued from its folder: the run's ``config.yaml`` with what the
    command line changes in it.

    :param saved: the run's ``config.yaml`` (resolved).
    :param before: the run's own overrides, composed now.
    :param after: the run's overrides merged with the command line's (:func:`merge_overrides`), composed.
    :return: ``after``, holding ``saved``'s value at every key where ``before`` and ``after`` agree
        (so that a default changed since the run started does not change the run); ``saved``'s
        keys that ``after`` lacks are left out (the checkpoint comparison names them).
    :raise ConfigError: a saved value the config's schema refuses.
    """
    old = flatten(OmegaConf.to_container(before, resolve=True))
    new = flatten(OmegaConf.to_container(after, resolve=True))
    changed = {k for k in old.keys() | new.keys() if old.get(k, _ABSENT) != new.get(k, _ABSENT)}
    cfg = after.copy()
    for key, kept in flatten(saved).items():
        if key in new and key not in changed:
            try:
                OmegaConf.update(cfg, key, kept, merge=False)
            except OmegaConfBaseException as e:
                raise ConfigError(f"{key}={kept!r} in the run's config.yaml: {str(e).splitlines()[0]}") from None
    return cfg


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, child in node.items():
        out.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
    return out


# --------------------------------------------------------------------------- the groups


# the model settings checked wherever a node has them: sizes (integers >= 1), rates in [0, 1), switches
MODEL_SIZES = ("emb_dim", "hidden_dim", "output_dim", "attn_dim", "num_layers", "d_model", "num_heads", "ff_dim",
               "max_positions")  # fmt: skip
MODEL_SWITCHES = ("layer_norm", "norm_first", "bidirectional", "input_feeding", "project", "tie_embeddings")


def _check_model(cfg: DictConfig) -> None:
    check_attention_fits(OmegaConf.select(cfg, "model.attention._target_"), OmegaConf.select(cfg, "model.decoder._target_"))
    check_int(cfg, "model.emb_dim", 1)
    rates = ["model.dropout", "model.src_word_dropout", "model.tgt_word_dropout"]
    for role in ("encoder", "decoder", "attention"):  # the attention's sizes interpolate the decoder's: its own first
        node = _select(cfg, f"model.{role}")
        keys = [str(k) for k in node] if isinstance(node, DictConfig) else []
        for key in keys:
            where = f"model.{role}.{key}"
            if key in MODEL_SIZES:
                check_int(cfg, where, 1)
            elif key.endswith("dropout"):
                rates.append(where)
            elif key in MODEL_SWITCHES:
                check_choice(cfg, where, (True, False))
    for key in rates:
        check_number(cfg, key, lambda v: 0 <= v < 1, "a probability in [0, 1)")
    check_choice(cfg, "model.tie_embeddings", (True, False))
    if check_choice(cfg, "model.share_embeddings", (True, False)) and not value(cfg, "data.vocab.joint"):
        raise ConfigError("model.share_embeddings=true needs one vocabulary for both languages: set data.vocab.joint=true")


def _check_data(cfg: DictConfig) -> None:
    check_int(cfg, "data.max_len", 1)
    check_int(cfg, "data.max_tokens", 1)
    check_choice(cfg, "data.vocab.type", VOCAB_TYPES)
    check_int(cfg, "data.vocab.size", MIN_VOCAB_SIZE)
    check_choice(cfg, "data.vocab.joint", (True, False))
    check_number(cfg, "data.vocab.character_coverage", lambda v: 0 < v <= 1, "a number in (0, 1]")
    check_int(cfg, "data.vocab.sample_size", 1000)
    check_int(cfg, "data.num_proc", 1)
    sampling = "data.subword_sampling"
    try:
        check_subword_sampling(value(cfg, "data.vocab.type"), value(cfg, f"{sampling}.alpha"),
                               value(cfg, f"{sampling}.nbest_size"), value(cfg, f"{sampling}.max_growth"))  # fmt: skip
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if value(cfg, "data.max_train_pairs") is not None:
        check_int(cfg, "data.max_train_pairs", 1)
    check_choice(cfg, "data.text_form", TEXT_FORMS)
    _check_extra_train(cfg)
    kind = check_choice(cfg, "data.kind", DATA_KINDS)
    if kind == "multi30k":
        _check_multi30k(cfg)
    elif kind == "hf":
        _check_hf(cfg)
    elif kind == "files":
        for side in ("train_src", "train_tgt", "valid_src", "valid_tgt"):
            check_file(cfg, f"data.{side}")
        if (value(cfg, "data.test_src") is None) != (value(cfg, "data.test_tgt") is None):
            raise ConfigError("data.test_src and data.test_tgt: give both files or neither")
        if value(cfg, "data.test_src") is not None:
            check_file(cfg, "data.test_src")
            check_file(cfg, "data.test_tgt")
    else:
        check_int(cfg, "data.words", 2)
        min_words = check_int(cfg, "data.min_words", 1)
        check_int(cfg, "data.max_words", min_words)
        for key in ("data.train_size", "data.valid_size", "data.test_size"):
            check_int(cfg, key, 1)


def _check_extra_train(cfg: DictConfig) -> None:
    files = {side: value(cfg, f"data.extra_train.{side}") for side in ("pairs", "src", "tgt")}
    try:
        check_extra_train(files["src"], files["tgt"], files["pairs"], value(cfg, "data.extra_train.pairs_langs"),
                          value(cfg, "data.src_lang"), value(cfg, "data.tgt_lang"))  # fmt: skip
    except DataError as e:
        raise ConfigError(str(e)) from None
    for side, path in files.items():
        if path is not None:
            check_file(cfg, f"data.extra_train.{side}")
    repeat = check_int(cfg, "data.extra_train.repeat", 1)
    if repeat > 1 and files["pairs"] is None and files["src"] is None:
        raise ConfigError(f"data.extra_train.repeat={repeat} without extra pairs: name them with "
                          "data.extra_train.pairs=FILE (or src=FILE tgt=FILE), or leave repeat at 1")  # fmt: skip


def _check_hf(cfg: DictConfig) -> None:
    if value(cfg, "data.path") in (None, ""):
        raise ConfigError("data.path: name the dataset, e.g. data.path=wmt14 data.name=de-en, or data.path=parquet")
    for role in ("train", "valid"):
        if value(cfg, f"data.splits.{role}") in (None, ""):
            raise ConfigError(f"data.splits.{role}: name the dataset's {role} split (e.g. train, validation)")
    columns = value(cfg, "data.src_column"), value(cfg, "data.tgt_column")
    if (columns[0] is None) != (columns[1] is None):
        raise ConfigError("data.src_column and data.tgt_column: give both (two text columns) or neither")
    if columns[0] is None and value(cfg, "data.src_lang") == value(cfg, "data.tgt_lang"):
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {value(cfg, 'data.src_lang')!r}; choose two languages")


def _check_multi30k(cfg: DictConfig) -> None:
    src, tgt = value(cfg, "data.src_lang"), value(cfg, "data.tgt_lang")
    try:
        check_multi30k_pair(src, tgt)
    except DataError as e:
        raise ConfigError(str(e)) from None
    splits = [("data.train_split", value(cfg, "data.train_split")), ("data.valid_split", value(cfg, "data.valid_split"))]
    splits += [(f"data.test_splits[{i}]", split) for i, split in enumerate(value(cfg, "data.test_splits"))]
    for key, split in splits:
        if split not in MULTI30K_SPLITS:
            raise ConfigError(f"{key}={split!r}: Multi30k has the splits {', '.join(MULTI30K_SPLITS)}")
        have = MULTI30K_SPLITS[split][1]
        for lang in (src, tgt):
            if lang not in have:
                raise ConfigError(f"{key}={split!r}: this split has no {lang!r} side (it has {', '.join(have)})")
    folder = value(cfg, "data.dir")
    if folder is not None and not Path(str(folder)).is_dir():
        raise ConfigError(f"data.dir={folder}: no such folder (it should hold the Multi30k raw files)")


def _check_train(cfg: DictConfig) -> None:
    check_number(cfg, "train.optimizer.lr", lambda v: v > 0, "a number > 0")
    check_number(cfg, "train.label_smoothing", lambda v: 0 <= v < 1, "a number in [0, 1)")
    check_number(cfg, "train.clip_norm", lambda v: v >= 0, "a number >= 0 (0 = no clipping)")
    minimum = {"max_epochs": 1, "max_steps": 0, "patience": 0, "seed": 0, "threads": 0, "accum_steps": 1,
               "eval_every": 0, "log_every": 1, "keep_checkpoints": 0, "max_bad_steps": 1, "num_heatmaps": 0,
               "decode_batch_size": 1, "val_beam_size": 1}  # fmt: skip
    for name, low in minimum.items():
        check_int(cfg, f"train.{name}", low)
    check_number(cfg, "train.ema", lambda v: v == 0 or 0 < v < 1, "0 (off) or a decay in (0, 1), e.g. 0.9995")
    check_choice(cfg, "train.amp", ("none", "bf16"))
    check_choice(cfg, "train.overwrite", (True, False))
    check_choice(cfg, "train.dist_backend", ("auto", "gloo", "nccl"))
    device = value(cfg, "train.device")
    if device != "auto":
        try:
            kind = torch.device(device).type
        except (RuntimeError, TypeError):
            raise ConfigError(f"train.device={device!r}: choose auto, cpu, cuda or cuda:<index>") from None
        if kind == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"train.device={device!r}: no GPU is visible; use train.device=auto or cpu")
    resume = value(cfg, "train.resume")
    if resume not in (None, "", "none", "auto") and not Path(str(resume)).is_file():
        raise ConfigError(
            f"train.resume={resume}: no such checkpoint file; give a file, auto (<run>/checkpoints/last.pt) or null"
        )
    check_search(cfg, "train.search")
    _check_guided_alignment(cfg)


def _check_guided_alignment(cfg: DictConfig) -> None:
    """``train.guided_alignment``: a links file (or ``gold``), a weight and decay that make sense, a
    model with attention to guide. The layer and heads are checked on the built model."""
    path = value(cfg, "train.guided_alignment.path")
    weight = check_number(cfg, "train.guided_alignment.weight", lambda v: v >= 0, "a number >= 0")
    check_number(cfg, "train.guided_alignment.decay", lambda v: 0 < v <= 1, "a factor in (0, 1] (1 = constant)")
    if path in (None, ""):
        return
    if path == GOLD:
        check_gold(value(cfg, "data.kind"))
        if any(value(cfg, f"data.extra_train.{side}") is not None for side in ("pairs", "src")):
            raise ConfigError("train.guided_alignment.path=gold: the synthetic task knows the links of its own pairs "
                              "only, not of data.extra_train's; give a links file of all the training pairs")  # fmt: skip
    else:
        check_file(cfg, "train.guided_alignment.path")
    if weight == 0:
        raise ConfigError("train.guided_alignment.weight=0 with a links file: give a weight > 0 (e.g. 0.1), or "
                          "train.guided_alignment.path=null to train without guidance")  # fmt: skip
    if value(cfg, "model.attention._target_") == NO_ATTENTION:
        raise ConfigError("train.guided_alignment.path is set but model.attention=none has no attention to guide; choose "
                          "an attention (e.g. model/attention=bahdanau) or train.guided_alignment.path=null")  # fmt: skip


def guided_attention(model: Seq2Seq, guided: DictConfig) -> None:
    """Make ``model`` return, in training, the attention that ``train.guided_alignment`` guides (a
    Transformer's chosen layer and heads, with the full target context if asked; an RNN decoder's
    one attention).

    :raise ConfigError: naming ``train.guided_alignment.layer``, ``.heads`` or ``.full_context``,
        for a choice the model does not have (or any choice, for an RNN decoder).
    """
    heads = None if guided.heads is None else [int(h) for h in guided.heads]
    try:
        model.set_alignment(guided.layer, heads, guided.full_context)
    except ValueError as e:
        raise ConfigError(str(e).replace("align.", "train.guided_alignment.")) from None


def _check_instantiation(cfg: DictConfig) -> None:
    """Build the model (vocabularies of 8), the optimizer and the scheduler once, without
    touching the global random state."""
    with torch.random.fork_rng(devices=[]):
        try:
            model = build_model(cfg.model, MIN_VOCAB_SIZE, MIN_VOCAB_SIZE)
            if value(cfg, "train.guided_alignment.path") not in (None, ""):
                guided_attention(model, cfg.train.guided_alignment)
            optimizer = hydra.utils.instantiate(cfg.train.optimizer)
            scheduler = hydra.utils.instantiate(cfg.train.scheduler)
        except InstantiationException as e:
            raise ConfigError(instantiation_message(e)) from None
        for key, partial in (("optimizer", optimizer), ("scheduler", scheduler)):
            _check_keywords(key, partial)
        try:  # both are partials: the optimizer takes parameters, the scheduler an optimizer
            optimizer = optimizer([torch.nn.Parameter(torch.zeros(1))])
        except (TypeError, ValueError) as e:
            raise ConfigError(f"train.optimizer: {e}") from None
        try:
            scheduler(optimizer)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"train.scheduler: {e}") from None


def _check_keywords(key: str, partial: Any) -> None:
    """Refuse ``train.<key>`` settings that its chosen class does not take. They usually come from
    an experiment written for another choice of the group (a Transformer recipe's
    ``train.scheduler.warmup_steps`` under ``train/scheduler=constant``), so the message names
    each one and the override that removes it."""
    if not isinstance(partial, functools.partial):
        return
    try:
        parameters = inspect.signature(partial.func).parameters
    except (TypeError, ValueError):  # a builtin without a signature: its own call reports
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = [name for name in partial.keywords if name not in parameters]
    if unknown:
        name = getattr(partial.func, "__name__", str(partial.func))
        raise ConfigError(
            f"{', '.join(f'train.{key}.{k}' for k in unknown)}: not a setting of {name} (train/{key}), perhaps "
            f"left by an experiment written for another train/{key}; remove "
            f"{'it' if len(unknown) == 1 else 'them'} with {' '.join(f'~train.{key}.{k}' for k in unknown)}"
        )


# --------------------------------------------------------------------------- single keys


def _select(cfg: DictConfig, key: str) -> Any:
    try:
        return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
    except MissingMandatoryValue:
        raise ConfigError(f"{key} is required but not set (it is ???); give it on the command line: {key}=...") from None
    except OmegaConfBaseException as e:  # e.g. an interpolation that does not resolve
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{key}: {first}") from None


def value(cfg: DictConfig, key: str) -> Any:
    """``cfg``'s value at the dotted ``key``; a missing or unset key is a :class:`ConfigError`."""
    found = _select(cfg, key)
    if found is _ABSENT:
        raise ConfigError(f"{key} is missing from the config")
    return found


def check_int(cfg: DictConfig, key: str, minimum: int) -> int:
    v = value(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{key}={v!r}: must be an integer >= {minimum}")
    return v


def check_number(cfg: DictConfig, key: str, accept: Callable[[float], bool], accepted: str) -> float:
    v = value(cfg, key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not accept(v):
        raise ConfigError(f"{key}={v!r}: must be {accepted}")
    return v


def check_choice(cfg: DictConfig, key: str, choices: tuple) -> Any:
    v = value(cfg, key)
    if isinstance(v, bool) != isinstance(choices[0], bool) or v not in choices:
        accepted = ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in choices)  # YAML spelling
        raise ConfigError(f"{key}={v!r}: choose one of {accepted}")
    return v


def check_file(cfg: DictConfig, key: str) -> Path:
    v = value(cfg, key)
    path = Path(str(v))
    if v in (None, "") or not path.is_file():
        raise ConfigError(f"{key}={v}: no such file" + (" (it is a folder)" if v and path.is_dir() else ""))
    return path
