"""Every option of every config group and every experiment composes with Hydra and instantiates:
models build (default and tiny sizes), data nodes load or point at their files, optimizers and
schedulers step; unknown options and misspelled keys fail loudly."""

from __future__ import annotations

import ast
import string
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from conftest import ATTENTIONS, CONFIG_DIR, REPO_ROOT, build_tiny_model
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue

import nmt
from nmt.configs import composition_problem
from nmt.configs.help import command_help
from nmt.data.corpora import load_corpus
from nmt.data.subwords import VocabSettings
from nmt.errors import ConfigError
from nmt.model import Seq2Seq, build_model
from nmt.search import SearchSettings
from nmt.training.checks import validate_config
from nmt.training.settings import TrainSettings


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


FILES_OVERRIDES = [f"data.{key}=/nonexistent/{key}.txt" for key in ("train_src", "train_tgt", "valid_src", "valid_tgt")]


def test_every_group_has_options() -> None:
    assert _options("model/attention") == sorted([*ATTENTIONS, "multihead"])
    assert set(_options("model/encoder")) >= {"bigru", "gru", "transformer"}
    assert set(_options("model/decoder")) >= {"bahdanau", "luong", "transformer"}
    assert set(_options("model")) == {"default", "transformer"}
    assert set(_options("data")) >= {"multi30k", "files", "synthetic"}
    assert set(_options("train/scheduler")) >= {"constant", "plateau", "warmup"}
    assert "smoke" in _options("experiment")


def test_default_config(compose_cfg) -> None:
    cfg = compose_cfg()
    assert cfg.data.kind == "multi30k"
    assert cfg.model.encoder._target_ == "nmt.encoder.RNNEncoder" and cfg.model.encoder.bidirectional
    assert cfg.model.attention._target_ == "nmt.attention.BahdanauAttention"
    assert cfg.model.decoder._target_ == "nmt.decoder.BahdanauDecoder"
    assert cfg.train.optimizer._partial_ and cfg.train.scheduler._partial_
    assert cfg.train.resume is None


@pytest.mark.parametrize("group", ["model/encoder", "model/attention", "model/decoder"])
def test_every_model_option_composes_and_builds_at_default_size(compose_cfg, group: str) -> None:
    # the Transformer decoder and multi-head attention come as a pair (model=transformer chooses both)
    partner = {"model/attention": {"multihead": "model/decoder=transformer"},
               "model/decoder": {"transformer": "model/attention=multihead"}}.get(group, {})  # fmt: skip
    for option in _options(group):
        cfg = compose_cfg(f"{group}={option}", *([partner[option]] if option in partner else []))
        node = OmegaConf.select(cfg, group.replace("/", "."))
        assert node._target_ == OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml")._target_
        model = build_model(cfg.model, 50, 60)
        assert isinstance(model, Seq2Seq)
        assert model.decoder.output.out_features == 60 and model.encoder.embedding.num_embeddings == 50


@pytest.mark.parametrize("encoder", _options("model/encoder"))
@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("decoder", ["bahdanau", "luong_feed"])
def test_every_tiny_model_combination_builds_and_runs(encoder: str, attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder, encoder)
    src = torch.tensor([[5, 6, 7], [8, 9, 0]])
    logits, weights = model(src, torch.tensor([3, 2]), torch.tensor([[2, 4], [2, 5]]))
    assert logits.shape == (2, 2, 29) and weights.shape == (2, 2, 3)
    assert sum(p.numel() for p in model.parameters()) < 60_000


def test_interpolated_sizes_follow_the_shared_values(compose_cfg) -> None:
    cfg = compose_cfg("model.emb_dim=48", "model.decoder.hidden_dim=100", "model.dropout=0.25")
    assert cfg.model.encoder.emb_dim == cfg.model.decoder.emb_dim == 48
    assert cfg.model.attention.attn_dim == 100
    for node, names in ((cfg.model.encoder, ("emb_dropout", "hidden_dropout")),
                        (cfg.model.decoder, ("emb_dropout", "hidden_dropout", "output_dropout"))):  # fmt: skip
        assert all(node[name] == 0.25 for name in names)
    assert cfg.model.decoder.state_dropout == 0.0  # its own default: the reference model has none
    model = build_model(cfg.model, 30, 30)
    assert model.encoder.embedding.embedding_dim == 48
    assert model.decoder.attention.query_proj.in_features == 100


def test_separate_dropout_rates_reach_their_layers(compose_cfg) -> None:
    cfg = compose_cfg("model.dropout=0.25", "model.emb_dropout=0.1", "model.hidden_dropout=0.2",
                      "model.state_dropout=0.3", "model.output_dropout=0.4", "model.encoder.num_layers=2",
                      "model.decoder.num_layers=2")  # fmt: skip
    model = build_model(cfg.model, 30, 30)
    enc, dec = model.encoder, model.decoder
    assert (enc.emb_dropout.p, enc.hidden_dropout.p, enc.rnn.dropout) == (0.1, 0.2, 0.2)
    assert (dec.emb_dropout.p, dec.hidden_dropout.p, dec.state_dropout.p, dec.dropout.p) == (0.1, 0.2, 0.3, 0.4)


def test_tied_embeddings_config(compose_cfg) -> None:
    cfg = compose_cfg("model.tie_embeddings=true", "model.emb_dim=16", "model.encoder.hidden_dim=8",
                      "model.decoder.hidden_dim=16")  # fmt: skip
    model = build_model(cfg.model, 30, 30)
    assert model.decoder.output.weight is model.decoder.embedding.weight


# --------------------------------------------------------------------------- data


def test_data_multi30k(compose_cfg, monkeypatch, tmp_path) -> None:
    cfg = compose_cfg("data=multi30k")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("de", "en")
    assert cfg.data.dir is None
    assert str(tmp_path) in cfg.data.cache_dir
    VocabSettings(**cfg.data.vocab)
    monkeypatch.setenv("NMT_MULTI30K_DIR", "/somewhere/multi30k")
    assert compose_cfg("data=multi30k").data.dir == "/somewhere/multi30k"
    assert compose_cfg("data=multi30k", "data.dir=/elsewhere").data.dir == "/elsewhere"


def test_data_files_needs_its_paths(compose_cfg) -> None:
    cfg = compose_cfg("data=files")
    with pytest.raises(MissingMandatoryValue):
        _ = cfg.data.train_src
    cfg = compose_cfg("data=files", *FILES_OVERRIDES)
    assert cfg.data.train_src == "/nonexistent/train_src.txt"
    assert cfg.data.test_src is None
    VocabSettings(**cfg.data.vocab)


def test_data_synthetic_loads(compose_cfg) -> None:
    cfg = compose_cfg("data=synthetic", "data.train_size=20", "data.valid_size=3", "data.test_size=2")
    VocabSettings(**cfg.data.vocab)
    corpus = load_corpus(cfg.data)
    assert {role: len(text) for role, text in corpus.items()} == {"train": 20, "valid": 3, "test": 2}


@pytest.mark.parametrize("option", _options("data"))
def test_every_data_option_composes(compose_cfg, option: str) -> None:
    extra = {"files": FILES_OVERRIDES, "hf": ["data.path=parquet"]}.get(option, [])
    cfg = compose_cfg(f"data={option}", *extra)
    assert cfg.data.kind == option
    for key in ("src_lang", "tgt_lang", "cache_dir", "max_len", "max_tokens", "vocab"):
        assert key in cfg.data, key
    OmegaConf.to_container(cfg.data, resolve=True, throw_on_missing=True)


# --------------------------------------------------------------------------- train


@pytest.mark.parametrize("option", _options("train/scheduler"))
def test_every_scheduler_instantiates_and_steps(compose_cfg, option: str) -> None:
    cfg = compose_cfg(f"train/scheduler={option}")
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = instantiate(cfg.train.optimizer)([param])
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.param_groups[0]["lr"] == cfg.train.optimizer.lr
    scheduler = instantiate(cfg.train.scheduler)(optimizer)
    for _ in range(3):
        param.sum().backward()
        optimizer.step()
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(1.0)
        else:
            scheduler.step()
    assert optimizer.param_groups[0]["lr"] > 0


def test_a_setting_the_chosen_scheduler_does_not_take_is_named_with_its_removal(compose_cfg) -> None:
    """A Transformer recipe sets ``train.scheduler.warmup_steps``; fine-tuning it under a constant
    learning rate must say which key to drop, and work once it is dropped."""
    cfg = compose_cfg("experiment=smoke_transformer", "train/scheduler=constant")
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert str(info.value).startswith("train.scheduler.warmup_steps: not a setting of ConstantLR")
    assert str(info.value).endswith("remove it with ~train.scheduler.warmup_steps")
    validate_config(compose_cfg("experiment=smoke_transformer", "train/scheduler=constant",
                                "~train.scheduler.warmup_steps"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"^train.optimizer.momentum: not a setting of Adam"):
        validate_config(compose_cfg("+train.optimizer.momentum=0.9"))


# --------------------------------------------------------------------------- experiments


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_every_experiment_composes_and_builds(compose_cfg, experiment: str) -> None:
    cfg = compose_cfg(f"experiment={experiment}")
    VocabSettings(**cfg.data.vocab)
    OmegaConf.to_container(cfg.model, resolve=True, throw_on_missing=True)
    OmegaConf.to_container(cfg.train, resolve=True, throw_on_missing=True)
    joint = cfg.model.share_embeddings  # one vocabulary for both sides
    model = build_model(cfg.model, 60, 60 if joint else 70)
    assert isinstance(model, Seq2Seq)
    instantiate(cfg.train.scheduler)(instantiate(cfg.train.optimizer)(model.parameters()))


def test_experiment_contents(compose_cfg) -> None:
    reference = compose_cfg("experiment=multi30k_de_en")
    assert reference.model.decoder._target_ == "nmt.decoder.BahdanauDecoder"
    assert reference.model.attention._target_ == "nmt.attention.BahdanauAttention"
    noattn = compose_cfg("experiment=multi30k_de_en_noattn")
    assert noattn.model.attention._target_ == "nmt.attention.NoAttention"
    # everything else is inherited from the reference experiment
    for key in ("data", "train"):
        assert OmegaConf.to_container(noattn[key], resolve=True) == OmegaConf.to_container(reference[key], resolve=True)
    assert noattn.model.decoder == reference.model.decoder
    smoke = compose_cfg("experiment=smoke")
    assert smoke.data.kind == "synthetic"
    assert smoke.train.scheduler._target_ == "torch.optim.lr_scheduler.ConstantLR"
    assert build_model(smoke.model, 40, 40).num_parameters() < 200_000


@pytest.mark.parametrize("model", [[], ["model/decoder=bahdanau"], ["model/attention=none"], ["model/attention=scaled_dot"],
                                   ["model/attention=luong_dot", "model/decoder=luong"],
                                   ["model/attention=luong_general", "model/decoder=luong"]])  # fmt: skip
def test_tuned_recipes_build_every_attention_table_model(compose_cfg, model: list[str]) -> None:
    """The README's attention table swaps attention and decoder in the tuned recipe; the two
    directions differ only in their languages (both dropped word dropout after a 16-epoch
    comparison on their validation sets), and the schedule ends inside the budget."""
    de_en = compose_cfg("experiment=multi30k_de_en_best", *model)
    en_de = compose_cfg("experiment=multi30k_en_de_best", *model)
    assert isinstance(build_model(de_en.model, 60, 70), Seq2Seq)
    assert (de_en.data.src_lang, de_en.data.tgt_lang, en_de.data.src_lang, en_de.data.tgt_lang) == ("de", "en", "en", "de")
    train = {name: OmegaConf.to_container(cfg.train, resolve=True) for name, cfg in (("de_en", de_en), ("en_de", en_de))}
    de_en_schedule, en_de_schedule = train["de_en"].pop("scheduler"), train["en_de"].pop("scheduler")
    assert train["de_en"] == train["en_de"]
    assert (de_en.model.src_word_dropout, de_en.model.tgt_word_dropout) == (0.0, 0.0)
    assert de_en.model == en_de.model
    # de-en halves after epochs 10, 12 and 14 of 16; en-de at the updates where its measured runs did:
    # the de-en epoch ends (Multi30k train in 4096-token batches: 134 updates an epoch de-en, 133 en-de)
    assert (de_en_schedule["unit"], de_en_schedule["milestones"]) == ("epoch", [10, 12, 14])
    assert max(de_en_schedule["milestones"]) < de_en.train.max_epochs
    de_en_ends = [134 * m for m in de_en_schedule["milestones"]]
    assert (en_de_schedule["unit"], en_de_schedule["milestones"]) == ("update", de_en_ends)
    assert max(en_de_schedule["milestones"]) < en_de.train.max_epochs * 133


def test_converged_recipes_change_only_regularisation_and_stopping(compose_cfg) -> None:
    """The converged recipes are the tuned ones with dropout 0.5, subword sampling, weight decay and
    a plateau schedule with early stopping; the model's shape and every other setting stay, and the
    two directions differ only in their languages."""
    best = compose_cfg("experiment=multi30k_de_en_best")
    de_en = compose_cfg("experiment=multi30k_de_en_converged")
    en_de = compose_cfg("experiment=multi30k_en_de_converged")
    assert (en_de.data.src_lang, en_de.data.tgt_lang) == ("en", "de")
    for cfg in (de_en, en_de):
        assert (cfg.model.hidden_dropout, cfg.model.output_dropout) == (0.5, 0.5)
        assert cfg.data.subword_sampling.alpha == 0.2
        assert cfg.train.optimizer.weight_decay == 1e-5
        assert cfg.train.scheduler._target_ == "torch.optim.lr_scheduler.ReduceLROnPlateau"
        assert 0 < cfg.train.patience < cfg.train.max_epochs
    swapped = OmegaConf.to_container(en_de, resolve=True)
    swapped["data"].update(src_lang="de", tgt_lang="en")
    changed = OmegaConf.to_container(de_en, resolve=True)
    assert swapped == changed
    reference = OmegaConf.to_container(best, resolve=True)
    for container in (changed, reference):
        for key in ("hidden_dropout", "output_dropout"):
            container["model"].pop(key)
            container["model"]["encoder"].pop(key, None)
            container["model"]["decoder"].pop(key, None)
        container["data"].pop("subword_sampling")
        container["train"]["optimizer"].pop("weight_decay")
        for key in ("scheduler", "max_epochs", "patience"):
            container["train"].pop(key)
    assert changed == reference
    assert build_model(en_de.model, 60, 70).num_parameters() == build_model(best.model, 60, 70).num_parameters()


def test_command_line_overrides_the_experiment(compose_cfg) -> None:
    cfg = compose_cfg("experiment=smoke", "data=files", *FILES_OVERRIDES, "model/attention=luong_general")
    assert cfg.data.kind == "files"
    assert cfg.data.max_tokens == OmegaConf.load(CONFIG_DIR / "experiment" / "smoke.yaml").data.max_tokens
    assert cfg.model.attention._target_ == "nmt.attention.LuongGeneralAttention"


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("override", ["model/attention=nonexistent", "data=wmt14", "experiment=nope",
                                      "train/scheduler=cosine", "model/encoder=lstm"])  # fmt: skip
def test_unknown_group_option_is_a_hydra_error(compose_cfg, override: str) -> None:
    with pytest.raises(MissingConfigException, match="Could not find"):
        compose_cfg(override)


def test_misspelled_key_fails(compose_cfg) -> None:
    with pytest.raises(ConfigCompositionException, match="hiden_dim"):
        compose_cfg("model.encoder.hiden_dim=3")
    cfg = compose_cfg("+model.encoder.hiden_dim=3")  # forced in: build_model must refuse it
    with pytest.raises(ConfigError, match="model.encoder.hiden_dim is not a setting of nmt.encoder.RNNEncoder"):
        build_model(cfg.model, 30, 30)


@pytest.mark.parametrize(("override", "key"), [("train.max_epochs=abc", "train.max_epochs"),
                                               ("train.overwrite=maybe", "train.overwrite"),
                                               ("train.search.beam_size=wide", "train.search.beam_size"),
                                               ("train.max_epoch=3", "train.max_epoch"),
                                               ("train.seed=1.5", "train.seed")])  # fmt: skip
def test_the_train_schema_refuses_unknown_keys_and_wrong_types(compose_cfg, override: str, key: str) -> None:
    with pytest.raises(ConfigCompositionException) as raised:
        compose_cfg(override)
    assert composition_problem("train", [override]).startswith(f"{key}: ")  # the commands' one line
    assert key in str(raised.value.__cause__ or raised.value)


def test_the_search_schema_types_translate_evaluate_and_demo() -> None:
    assert composition_problem("translate", ["ckpt=x", "beam_size=5", "alpha=1"]) is None
    assert composition_problem("translate", ["ckpt=x", "beam_size=wide"]).startswith("beam_size: ")
    assert composition_problem("evaluate", ["out_dir=o", "search.max_len_b=1.5"]).startswith("search.max_len_b: ")
    assert composition_problem("demo", ["beam_size=x"]).startswith("beam_size: ")


def test_a_typo_in_a_recipe_file_is_refused_naming_the_key(tmp_path) -> None:
    """Without the schema a misspelt key in a user's own experiment file was merged silently."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\ntrain:\n  max_epoch: 3\n")
    problem = composition_problem("train", [f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])
    assert problem is not None and "train.max_epoch: no such setting" in problem and "experiment/mine" in problem


def test_only_the_commands_import_the_configs_package() -> None:
    """The import-linter layers cannot see nmt.configs (it is the configs/ folder): the commands
    and nothing below them may import it."""
    commands = {"train", "translate", "evaluate", "demo", "study", "average", "score", "align", "links"}
    package = Path(nmt.__file__).parent
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])]
            if isinstance(node, ast.Import | ast.ImportFrom) and any(n.startswith("nmt.configs") for n in names):
                importers.add(path.relative_to(package).with_suffix("").as_posix())
    assert importers and importers <= commands, importers


def test_every_train_and_search_key_is_typed_and_given_a_default(compose_cfg) -> None:
    """The schema and the YAML defaults name the same keys: nothing composes to ??? and nothing
    in the YAML lacks a type."""
    cfg = compose_cfg()
    assert set(cfg.train) == {f.name for f in fields(TrainSettings)}
    assert set(cfg.train.search) == {f.name for f in fields(SearchSettings)}
    assert OmegaConf.missing_keys(cfg.train) == set()
    assert OmegaConf.get_type(cfg.train) is TrainSettings


def test_one_search_group_serves_training_translation_and_evaluation(compose_cfg) -> None:
    """The decoding keys and defaults are written once (configs/search/); translate and evaluate
    leave every key null, meaning the checkpoint's own train.search."""
    assert _options("search") == ["checkpoint", "default"]
    default = OmegaConf.load(CONFIG_DIR / "search" / "default.yaml")
    default.pop("defaults")  # the schema: nmt.search.SearchSchema
    assert OmegaConf.to_container(compose_cfg().train.search) == OmegaConf.to_container(default)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        translate, evaluate = compose("translate", overrides=["ckpt=x"]), compose("evaluate", overrides=["out_dir=o"])
    for node in (translate, evaluate.search):
        assert {key: node[key] for key in default} == dict.fromkeys(default)
    SearchSettings(**compose_cfg().train.search)  # the defaults pass the one check


# --------------------------------------------------------------------------- --help


@pytest.mark.slow
def test_translate_help_shows_its_own_options_only() -> None:
    """Before, ``--help`` listed training's config groups and the schema nodes of the typed ones."""
    proc = subprocess.run([sys.executable, "-m", "nmt.translate", "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "ckpt: ???  # a checkpoint written by nmt.train" in proc.stdout and "beam_size: null" in proc.stdout
    for foreign in ("model/encoder", "train/scheduler", "experiment", "schema", "Configuration groups"):
        assert foreign not in proc.stdout, foreign


@pytest.mark.parametrize("command", ["translate", "evaluate", "score", "align", "demo", "links"])
def test_every_setting_of_a_command_is_in_its_help(command: str) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(command, return_hydra_config=True)
    text = string.Template(cfg.hydra.help.template).substitute(FLAGS_HELP="", APP_CONFIG_GROUPS="", CONFIG="")  # as Hydra
    assert text == command_help(CONFIG_DIR, command).replace("$$", "$")  # e.g. evaluate's $NMT_MULTI30K_DIR
    for key in (k for k in cfg if k != "hydra"):
        assert f"\n{key}: " in text or f"\n{key}:\n" in text, key
    assert "model/" not in text and "train/" not in text


@pytest.mark.slow
def test_the_train_help_lists_its_groups_and_their_options_a_config_dirs_included(tmp_path: Path) -> None:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "nmt.train", "--config-dir", str(tmp_path), "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for group in ("data", "model", "model/encoder", "model/attention", "model/decoder", "train/scheduler"):
        assert f"\n  {group}: {', '.join(_options(group))}" in proc.stdout, group
    assert f"\n  experiment: {', '.join(sorted([*_options('experiment'), 'mine']))}  (default: none)" in proc.stdout
    assert "search" not in proc.stdout and "schema" not in proc.stdout
