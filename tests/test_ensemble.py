"""Ensembles: one member decodes as the model itself, two identical members as one, greedy and
beam search of two different members agree with a slow reference that scores each prefix with
full teacher-forced passes, the shown attention is the members' average, and checkpoints that do
not belong together are refused in one line, in the API and on the command lines."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun, build_tiny_model, random_batch

from nmt.checkpoint import load_checkpoint
from nmt.ensemble import Ensemble, load_system, split_members
from nmt.errors import CheckpointError
from nmt.search import beam_search, greedy_search, length_penalty
from nmt.tokens import pad_sources
from nmt.translator import Translator
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID

MODELS = [("bahdanau", "bahdanau"), ("luong_general", "luong_feed")]  # the Luong state has two tensors


def _members(attention: str, decoder: str, seeds=(0, 1)) -> list:
    return [build_tiny_model(attention, decoder, seed=seed) for seed in seeds]


def _reference_log_probs(members: list, rule: str, src: torch.Tensor, src_len: torch.Tensor, prefix: list[int]):
    """The combined next-token log-probabilities after ``prefix`` (BOS first), each member run
    over the whole prefix teacher-forced: no step state is carried."""
    tgt_in = torch.tensor([prefix])
    rows = []
    for member in members:
        logits, _ = member(src, src_len, tgt_in)  # (1, T, V)
        rows.append(torch.log_softmax(logits[0, -1].float(), dim=-1))
    stacked = torch.stack(rows)
    combined = torch.logsumexp(stacked, 0) - math.log(len(rows)) if rule == "mean" else stacked.mean(0)
    combined = torch.log_softmax(combined, dim=-1)
    combined[PAD_ID] = combined[BOS_ID] = float("-inf")
    return combined


@pytest.mark.parametrize(("attention", "decoder"), MODELS)
@pytest.mark.parametrize("rule", ["log_mean", "mean"])
def test_greedy_search_agrees_with_a_slow_reference(attention: str, decoder: str, rule: str) -> None:
    members = _members(attention, decoder)
    ensemble = Ensemble(members, rule).eval()
    src, src_lens, _ = random_batch([5, 3, 7], 2, seed=3)
    with torch.inference_mode():
        hyps = greedy_search(ensemble, src, src_lens, max_len_a=1.0, max_len_b=4, return_attention=False)
        for row, (hyp,) in enumerate(hyps):
            length = int(src_lens[row])
            one_src, one_len = src[row : row + 1, :length], src_lens[row : row + 1]
            prefix, total, limit = [BOS_ID], 0.0, int(1.0 * length + 4)
            while True:
                log_probs = _reference_log_probs(members, rule, one_src, one_len, prefix)
                if len(prefix) == limit:  # the last step allows only EOS
                    token = EOS_ID
                else:
                    token = int(log_probs.argmax())
                total += float(log_probs[token])
                if token == EOS_ID:
                    break
                prefix.append(token)
            assert hyp.tokens == prefix[1:]
            assert hyp.score == pytest.approx(total, abs=1e-4)


@pytest.mark.parametrize(("attention", "decoder"), MODELS)
def test_every_beam_hypothesis_has_the_reference_score(attention: str, decoder: str) -> None:
    """Beam search over the ensemble's distribution: each of the n-best scores equals the slow
    reference's summed log-probability of its tokens and EOS, over the GNMT length penalty."""
    members = _members(attention, decoder)
    ensemble = Ensemble(members).eval()
    src, src_lens, _ = random_batch([6, 4], 2, seed=5)
    with torch.inference_mode():
        hyps = beam_search(ensemble, src, src_lens, 4, 3, "gnmt", 1.0, 1.0, 4, return_attention=False)
        greedy = greedy_search(ensemble, src, src_lens, 1.0, 4, return_attention=False)
        for row, sentence in enumerate(hyps):
            length = int(src_lens[row])
            one_src, one_len = src[row : row + 1, :length], src_lens[row : row + 1]
            assert len(sentence) == 3
            for hyp in sentence:
                tokens = [*hyp.tokens, EOS_ID]
                total = sum(float(_reference_log_probs(members, "log_mean", one_src, one_len, [BOS_ID, *tokens[:i]])[t])
                            for i, t in enumerate(tokens))  # fmt: skip
                lp = float(length_penalty(torch.tensor(float(len(tokens))), "gnmt", 1.0))
                assert hyp.score == pytest.approx(total / lp, abs=1e-4)
            greedy_lp = float(length_penalty(torch.tensor(float(len(greedy[row][0].tokens) + 1)), "gnmt", 1.0))
            assert sentence[0].score >= greedy[row][0].score / greedy_lp - 1e-5


@pytest.mark.parametrize(("attention", "decoder"), MODELS)
@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_one_is_the_model_and_of_two_copies_is_one(attention: str, decoder: str, beam: int) -> None:
    model = build_tiny_model(attention, decoder, seed=2)
    src, src_lens, _ = random_batch([5, 2, 6, 4], 2, seed=1)

    def decode(m):
        with torch.inference_mode():
            if beam == 1:
                return greedy_search(m, src, src_lens, 1.5, 3, return_attention=True)
            return beam_search(m, src, src_lens, beam, 2, "gnmt", 0.6, 1.5, 3, return_attention=True)

    alone = decode(model)
    for ensemble in (Ensemble([model]), Ensemble([model, model]), Ensemble([model, model], "mean")):
        together = decode(ensemble.eval())
        for mine, theirs in zip(alone, together):
            assert [h.tokens for h in mine] == [h.tokens for h in theirs]
            for a, b in zip(mine, theirs):
                assert b.score == pytest.approx(a.score, abs=1e-5)
                torch.testing.assert_close(b.attention, a.attention, atol=1e-6, rtol=0)


def test_the_attention_shown_is_the_members_average() -> None:
    members = _members("bahdanau", "bahdanau")
    ensemble = Ensemble(members).eval()
    src, src_lens = pad_sources([[5, 6, 7, 8], [9, 10]])
    with torch.inference_mode():
        hyps = greedy_search(ensemble, src, src_lens, 1.0, 3, return_attention=True)
        for row, (hyp,) in enumerate(hyps):
            length = int(src_lens[row])
            tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]])
            weights = [m(src[row : row + 1, :length], src_lens[row : row + 1], tgt_in)[1][0] for m in members]
            expected = torch.stack(weights).mean(0)  # (T, S)
            torch.testing.assert_close(hyp.attention[:, :length], expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(hyp.attention.sum(-1), torch.ones(len(hyp.tokens) + 1), atol=1e-5, rtol=0)


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="ensemble_rule='max': choose one of log_mean, mean"):
        Ensemble(_members("bahdanau", "bahdanau"), "max")


# --------------------------------------------------------------------------- checkpoints


def test_member_names(tmp_path: Path) -> None:
    assert split_members("a/best.pt+b/best.pt") == [Path("a/best.pt"), Path("b/best.pt")]
    odd = tmp_path / "c+d.pt"
    odd.write_bytes(b"")
    assert split_members(odd) == [odd]  # an existing file is one checkpoint, '+' or not
    with pytest.raises(CheckpointError, match="an empty checkpoint name"):
        split_members("a.pt++b.pt")


def _variant(smoke_run: SmokeRun, folder: Path, name: str, change) -> Path:
    payload = load_checkpoint(smoke_run.checkpoint)
    change(payload)
    path = folder / name
    torch.save(payload, path)
    return path


def test_checkpoints_that_do_not_belong_together_are_refused(smoke_run: SmokeRun, tmp_path: Path) -> None:
    ckpt = smoke_run.checkpoint

    def other_direction(payload):
        payload["config"]["data"]["src_lang"], payload["config"]["data"]["tgt_lang"] = "xx", "yy"

    def other_subwords(payload):  # the same size, another model (one piece scored differently)
        from sentencepiece import sentencepiece_model_pb2  # protobuf comes with tensorboard

        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(payload["vocab"]["tgt"])
        proto.pieces[-1].score -= 1.0
        payload["vocab"]["tgt"] = proto.SerializeToString()

    turned = _variant(smoke_run, tmp_path, "turned.pt", other_direction)
    with pytest.raises(CheckpointError, match=r"turned.pt translates xx->yy and .*best.pt .*: an ensemble's checkpoints "
                                              "must translate the same direction"):  # fmt: skip
        load_system(f"{ckpt}+{turned}", torch.device("cpu"))
    resegmented = _variant(smoke_run, tmp_path, "resegmented.pt", other_subwords)
    with pytest.raises(CheckpointError, match="resegmented.pt has another target subword model than"):
        load_system([ckpt, resegmented], torch.device("cpu"))
    with pytest.raises(CheckpointError, match="missing.pt"):
        load_system(f"{ckpt}+{tmp_path / 'missing.pt'}", torch.device("cpu"))


@pytest.mark.slow
def test_translator_and_translate_decode_an_ensemble(smoke_run: SmokeRun, tmp_path: Path, in_process) -> None:
    """Two copies of one checkpoint translate as the checkpoint does, through the API and the command."""
    ckpt = str(smoke_run.checkpoint)
    single, pair = Translator.from_checkpoint(ckpt, device="cpu"), Translator.from_checkpoint([ckpt, ckpt], device="cpu")
    assert isinstance(pair.model, Ensemble) and pair.has_attention
    sources = smoke_run.test_src[:8]
    alone, together = single.translate(sources, return_attention=True), pair.translate(sources, return_attention=True)
    assert [r.text for r in alone] == [r.text for r in together]
    for a, b in zip(alone, together):
        assert b.score == pytest.approx(a.score, abs=1e-5)
        assert b.attention.shape == a.attention.shape
    source = tmp_path / "src.txt"
    source.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    outputs = []
    for spec in (ckpt, f"{ckpt}+{ckpt}"):
        proc = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={spec}", f"input={source}", "threads=1"],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] == "".join(r.text + "\n" for r in alone)


@pytest.mark.slow
def test_evaluate_scores_an_ensemble_beside_its_member(smoke_run: SmokeRun, tmp_path: Path) -> None:
    ckpt = smoke_run.checkpoint
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("".join(s + "\n" for s in smoke_run.test_src), encoding="utf-8")
    reference.write_text("".join(s + "\n" for s in smoke_run.test_tgt), encoding="utf-8")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "nmt.evaluate", f"src={source}", f"ref={reference}",
                           f"ckpt=[one:{ckpt},two:{ckpt}+{ckpt}]", f"out_dir={out}", "n_bootstrap=0",
                           "significance=none", "alignments.num=1", "threads=1"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = ((out / "hypotheses" / f"{name}.txt").read_text(encoding="utf-8") for name in ("one", "two"))
    assert one == two and one.count("\n") == len(smoke_run.test_src)
    turned = _variant(smoke_run, tmp_path, "turned.pt", lambda p: p["config"]["data"].update(src_lang="xx"))
    proc = subprocess.run([sys.executable, "-m", "nmt.evaluate", f"src={source}", f"ref={reference}",
                           f"ckpt=[bad:{ckpt}+{turned}]", f"out_dir={tmp_path / 'eval2'}"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and len(errors) == 1 and "same direction" in errors[0], proc.stderr[-2000:]


def test_the_explorer_shows_an_ensemble_beside_its_member(smoke_run: SmokeRun, in_process) -> None:
    from hydra import compose, initialize_config_dir

    from nmt.configs import CONFIG_DIR
    from nmt.demo import load_explorer

    ckpt = smoke_run.checkpoint
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("demo", overrides=[f"ckpt=[one:{ckpt},two:{ckpt}+{ckpt}]", "device=cpu", "threads=1"])
    explorer = load_explorer(cfg)
    assert isinstance(explorer.translators["two"].model, Ensemble)
    assert [m["attention"] for m in explorer.models()] == [True, True]
    answer = explorer.translate({"text": smoke_run.test_src[0], "beam_size": 2})
    assert isinstance(answer, dict) and len(str(answer)) > 0
    texts = {name: explorer.translators[name].translate(smoke_run.test_src[0], beam_size=2).text for name in ("one", "two")}
    assert texts["one"] == texts["two"]
