"""``scripts/bench_joey.py`` and ``scripts/bench_joey_train.py``: Joey NMT is given the model ``nmt``
builds and the batches ``nmt`` trains on, so the ratios compare like with like. (Joey NMT itself is
not needed: these check the configs and files it is handed.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, ToyCorpus

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from bench_joey import MODELS, joey_model, joey_translate_config, nmt_config  # noqa: E402
from bench_joey_train import joey_train_config, write_pairs  # noqa: E402
from benchmark import analytic_macs, update_batches  # noqa: E402


def test_joey_nmt_gets_the_architecture_and_sizes_of_the_nmt_rnn(tmp_path: Path) -> None:
    cfg = nmt_config("rnn")
    ours = cfg.model
    joey = joey_translate_config(tmp_path, tmp_path / "spm.model", tmp_path / "vocab.txt", cfg, 64, 16)
    enc, dec = joey["model"]["encoder"], joey["model"]["decoder"]
    assert (enc["rnn_type"], enc["bidirectional"], enc["num_layers"]) == ("gru", True, ours.encoder.num_layers)
    assert enc["hidden_size"] == ours.encoder.hidden_dim and dec["hidden_size"] == ours.decoder.hidden_dim
    assert enc["embeddings"]["embedding_dim"] == dec["embeddings"]["embedding_dim"] == ours.emb_dim
    assert (dec["attention"], dec["input_feeding"], dec["init_hidden"]) == ("bahdanau", True, "bridge")
    assert ours.attention._target_ == "nmt.attention.BahdanauAttention"
    assert ours.decoder.input_feeding and ours.decoder.init_state == "bridge" and not ours.decoder.layer_norm
    # both decode exactly `length` subwords a sentence, so they do the same work
    assert joey["testing"]["min_output_length"] == joey["testing"]["max_output_length"] == 16
    assert joey["data"]["src"]["tokenizer_cfg"]["model_file"] == str(tmp_path / "spm.model")
    assert (joey["data"]["src"]["lang"], joey["data"]["trg"]["lang"]) == (cfg.data.src_lang, cfg.data.tgt_lang)


def test_joey_nmt_gets_the_transformer_recipe() -> None:
    ours = nmt_config("transformer").model
    joey = joey_model(ours)
    assert joey["tied_embeddings"] and joey["tied_softmax"]  # one matrix: source, target, output layer
    assert ours.share_embeddings and ours.tie_embeddings
    for side, theirs in ((ours.encoder, joey["encoder"]), (ours.decoder, joey["decoder"])):
        assert theirs["type"] == "transformer" and theirs["layer_norm"] == "pre" and side.norm_first
        assert (theirs["num_layers"], theirs["num_heads"], theirs["ff_size"]) == (4, 4, 256)
        assert (side.num_layers, side.num_heads, side.ff_dim) == (4, 4, 256)
        assert theirs["hidden_size"] == theirs["embeddings"]["embedding_dim"] == side.d_model == 128
        assert theirs["embeddings"]["scale"]  # nmt scales the embeddings by sqrt(d_model) too
        # Joey NMT's one rate is on the sublayer outputs, the attention weights and inside the FFN
        assert theirs["dropout"] == side.dropout == side.attention_dropout == side.activation_dropout == 0.3
    assert ours.attention.num_heads == 4 and ours.attention.dropout == 0.3


@pytest.mark.parametrize("model", list(MODELS))
def test_both_models_have_one_joint_vocabulary(model: str) -> None:
    """Joey NMT is handed one vocabulary file for both sides."""
    assert nmt_config(model).data.vocab.joint


@pytest.mark.parametrize("change", [
    "model/decoder=bahdanau",  # Joey NMT's GRU decoder is Luong's
    "model.decoder.layer_norm=true",
    "model.decoder.positions=learned",
    "model.attention.num_heads=2",
    "model.attention_dropout=0.1",
])  # fmt: skip
def test_an_architecture_joey_nmt_builds_otherwise_is_refused(change: str) -> None:
    model = "rnn" if "decoder=" in change or "layer_norm" in change else "transformer"
    with pytest.raises(ValueError, match="Joey NMT"):
        joey_model(nmt_config(model, [change]).model)


def test_joey_nmt_trains_with_the_recipes_loss_and_optimizer(tmp_path: Path) -> None:
    cfg = nmt_config("transformer")
    joey = joey_train_config(tmp_path, tmp_path / "spm.model", tmp_path / "vocab.txt", cfg)
    training = joey["training"]
    optimizer = cfg.train.optimizer
    assert (training["optimizer"], training["learning_rate"]) == ("adam", optimizer.lr)
    assert training["adam_betas"] == list(optimizer.betas)
    assert training["label_smoothing"] == cfg.train.label_smoothing == 0.1
    assert training["clip_grad_norm"] == cfg.train.clip_norm
    assert training["normalization"] == "tokens"  # the loss over the target tokens, as nmt's
    assert joey["data"]["train"] == str(tmp_path / "train")
    sgd = nmt_config("transformer", ["train.optimizer._target_=torch.optim.SGD"])
    with pytest.raises(ValueError, match="Adam"):
        joey_train_config(tmp_path, tmp_path / "spm.model", tmp_path / "vocab.txt", sgd)


def test_joey_nmt_reads_the_pairs_of_the_batches_nmt_trains_on(toy_corpus: ToyCorpus, compose_cfg,
                                                               tmp_path: Path) -> None:  # fmt: skip
    """The text written for Joey NMT is the batches' pairs in order, and its target side tokenizes
    (with the same subword model) to the target tokens nmt counts."""
    from nmt.data.batches import prepare_data

    cfg = compose_cfg(*toy_corpus.overrides(), "data.vocab.size=60", "data.max_tokens=120")
    data = prepare_data(cfg.data)
    groups = update_batches(data.train, cfg, 4)
    write_pairs(tmp_path, cfg, data, groups)
    src = (tmp_path / f"train.{cfg.data.src_lang}").read_text(encoding="utf-8").splitlines()
    tgt = (tmp_path / f"train.{cfg.data.tgt_lang}").read_text(encoding="utf-8").splitlines()
    assert len(src) == len(tgt) == sum(len(g) for g in groups) and len(groups) == 4
    start = 0
    for group in groups:
        pieces = data.tgt_vocab.encode(tgt[start : start + len(group)])
        assert sum(len(p) + 1 for p in pieces) == int(data.train.tgt_lens[group].sum())  # + EOS, as nmt counts
        assert data.src_vocab.encode(src[start : start + len(group)]) == [list(data.train.source(i)) for i in group]
        start += len(group)


def test_the_benchmark_counts_the_transformers_matmuls() -> None:
    """Per target token: every decoder projection and the output layer, plus attention over T and S
    positions; per source token: the encoder and the cross-attention's keys and values."""
    from nmt.model import build_model

    model = build_model(nmt_config("transformer").model, 100, 100)
    d, layers = 128, 4
    per_tgt, per_src = analytic_macs(model, src_len=10, tgt_len=12)
    attention, ffn = 4 * d * d, 2 * d * 256  # q, k, v, o; two FFN matrices
    assert per_src == layers * (attention + ffn + 2 * d * 10) + layers * 2 * d * d
    assert per_tgt == layers * (attention + 2 * d * d + ffn + 2 * d * (12 + 10)) + d * 100
