"""``scripts/bench_joey.py``: Joey NMT is given the model ``nmt`` times, so the ratio compares like with like."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conftest import CONFIG_DIR, REPO_ROOT
from hydra import compose, initialize_config_dir

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from bench_joey import joey_config  # noqa: E402


def test_joey_nmt_gets_the_architecture_and_sizes_of_the_nmt_model(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        ours = compose("train", overrides=["experiment=multi30k_de_en_best", "model.decoder.layer_norm=false"]).model
    args = argparse.Namespace(batch_size=64, length=16)
    joey = joey_config(tmp_path, tmp_path / "spm.model", tmp_path / "vocab.txt", args)
    enc, dec = joey["model"]["encoder"], joey["model"]["decoder"]
    assert (enc["rnn_type"], enc["bidirectional"], enc["num_layers"]) == ("gru", True, ours.encoder.num_layers)
    assert enc["hidden_size"] == ours.encoder.hidden_dim and dec["hidden_size"] == ours.decoder.hidden_dim
    assert enc["embeddings"]["embedding_dim"] == dec["embeddings"]["embedding_dim"] == ours.emb_dim
    assert (dec["attention"], dec["input_feeding"], dec["init_hidden"]) == ("bahdanau", True, "bridge")
    assert ours.attention._target_ == "nmt.attention.BahdanauAttention"
    assert ours.decoder.input_feeding and ours.decoder.init_state == "bridge"
    # both decode exactly `length` subwords a sentence, so they do the same work
    assert joey["testing"]["min_output_length"] == joey["testing"]["max_output_length"] == args.length
    assert joey["data"]["src"]["tokenizer_cfg"]["model_file"] == str(tmp_path / "spm.model")
