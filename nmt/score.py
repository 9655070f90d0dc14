"""``python -m nmt.score``: the model's log-probability of given translations (forced decoding),
built on :func:`nmt.translator.score_pairs`.

For each pair it writes one record, in input order: the summed log-probability of the target's
subwords and EOS, the length-normalised score (log-probability / lp(length), the length penalty
of beam search, so it compares with a beam hypothesis's score), and the log-probability of each
subword. The log line at the end gives the corpus perplexity, exp(-sum of log-probabilities /
number of target subwords with EOS).

With ``nbest=true`` the targets are ``nmt.translate``'s n-best output (``index<TAB>score<TAB>text``)
and ``rerank=FILE`` writes, for each source line, the hypothesis that scores best by the new
scores (plus ``nbest_weight`` times its original score): the reranking recipe of
docs/guide/scoring.md.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from nmt.configs import command
from nmt.data.text import BAD_UTF8, DataError, read_input
from nmt.ensemble import load_system, split_members
from nmt.errors import ConfigError, command_errors
from nmt.files import check_output, write_command_output, write_output_text
from nmt.runtime import resolve_device, set_threads, setup_logging
from nmt.search import LENGTH_PENALTIES
from nmt.translator import Score, in_checkpoint_form, score_pairs

log = logging.getLogger("nmt.score")

FORMATS = ("jsonl", "tsv")


@dataclass
class Candidate:
    """One line of an n-best list: the source line it translates (0-based), its score, its text."""

    index: int
    score: float
    text: str


def parse_nbest(lines: list[str], name: str, num_sources: int) -> list[Candidate]:
    """``index<TAB>score<TAB>text`` lines (``nmt.translate n_best=K``); a bad line is refused naming it."""
    out = []
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t", 2)
        try:
            index, score = int(parts[0]), float(parts[1])
            text = parts[2] if len(parts) == 3 else ""
        except (ValueError, IndexError):
            raise DataError(f"{name}, line {number}: expected index<TAB>score<TAB>text (nmt.translate n_best=K output), "
                            f"got {line[:60]!r}") from None  # fmt: skip
        if not 0 <= index < num_sources:
            raise DataError(f"{name}, line {number}: index {index}, but the source has {num_sources} lines (0-based)")
        out.append(Candidate(index, score, text))
    return out


def format_scores(scores: list[Score], fmt: str, lines: list[int], candidates: list[Candidate] | None) -> str:
    """The output text: one JSON object (``jsonl``) or tab-separated row (``tsv``) per scored pair.

    :param lines: the 1-based input line of each pair.
    """
    out = []
    for i, (score, line) in enumerate(zip(scores, lines)):
        if fmt == "tsv":
            per_token = " ".join(f"{v:.4f}" for v in score.token_logprobs)
            row = [str(line), f"{score.logprob:.4f}", f"{score.normalized:.4f}", per_token]
            if candidates is not None:
                row[1:1] = [str(candidates[i].index)]
            out.append("\t".join(row))
            continue
        record = {"line": line}
        if candidates is not None:
            record.update(index=candidates[i].index, nbest_score=candidates[i].score)
        record.update(logprob=round(score.logprob, 6), normalized=round(score.normalized, 6), length=score.length,
                      tokens=score.tokens, token_logprobs=[round(v, 6) for v in score.token_logprobs])  # fmt: skip
        out.append(json.dumps(record, ensure_ascii=False))
    return "".join(line + "\n" for line in out)


def rerank(scores: list[Score], candidates: list[Candidate], num_sources: int, weight: float) -> list[str]:
    """For each source line the text of its best candidate by ``normalized + weight x nbest score``
    (ties: the first in the list); a source line without candidates gets an empty line."""
    best: dict[int, tuple[float, str]] = {}
    for score, cand in zip(scores, candidates):
        value = score.normalized + weight * cand.score
        if cand.index not in best or value > best[cand.index][0]:
            best[cand.index] = (value, cand.text)
    return [best[i][1] if i in best else "" for i in range(num_sources)]


def check_config(cfg: DictConfig) -> None:
    """Before any work: the choices are known and the outputs can be written."""
    for key, value, choices in (("format", cfg.format, FORMATS), ("on_bad_utf8", cfg.on_bad_utf8, BAD_UTF8)):
        if value not in choices:
            raise ConfigError(f"{key}={value!r}: choose one of {', '.join(choices)}")
    if cfg.length_penalty is not None and cfg.length_penalty not in LENGTH_PENALTIES:
        raise ConfigError(f"length_penalty={cfg.length_penalty!r}: choose one of {', '.join(LENGTH_PENALTIES)}")
    if cfg.rerank is not None and not cfg.nbest:
        raise ConfigError("rerank needs an n-best list: give nbest=true and tgt=<nmt.translate n_best=K output>")
    inputs = [cfg.src, cfg.tgt, *split_members(cfg.ckpt)]
    for key in ("output", "rerank"):
        if cfg[key] not in (None, "-"):
            check_output(cfg[key], key, inputs=inputs)
    if cfg.output not in (None, "-") and cfg.output == cfg.rerank:
        raise ConfigError(f"output and rerank are both {cfg.output}; give two files")


def score(cfg: DictConfig) -> dict[str, float]:
    """Everything ``python -m nmt.score`` does; returns the corpus figures."""
    check_config(cfg)
    sources = read_input(cfg.src, cfg.on_bad_utf8)
    target_lines = read_input(cfg.tgt, cfg.on_bad_utf8)
    tgt_name = "<stdin>" if cfg.tgt == "-" else str(cfg.tgt)
    candidates = parse_nbest(target_lines, tgt_name, len(sources)) if cfg.nbest else None
    if candidates is None and len(target_lines) != len(sources):
        raise DataError(f"{tgt_name} has {len(target_lines)} lines but {cfg.src} has {len(sources)}: one translation "
                        "a source line (or nbest=true for an n-best list)")  # fmt: skip
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    model, src_vocab, tgt_vocab, config = load_system(cfg.ckpt, device, cfg.ensemble_rule, cfg.precision)
    log.info("loaded %s (precision %s) on %s", cfg.ckpt, cfg.precision, device)
    penalty = cfg.length_penalty if cfg.length_penalty is not None else config.train.search.length_penalty
    alpha = cfg.alpha if cfg.alpha is not None else config.train.search.alpha
    max_src_len = cfg.max_src_len if cfg.max_src_len is not None else config.data.max_len
    pair_sources = [sources[c.index] for c in candidates] if candidates is not None else sources
    pair_targets = [c.text for c in candidates] if candidates is not None else target_lines
    pair_sources = in_checkpoint_form(pair_sources, config)  # as the model read text in training (data.text_form)
    pair_targets = in_checkpoint_form(pair_targets, config, "target")
    scores, _ = score_pairs(model, src_vocab, tgt_vocab, pair_sources, pair_targets, penalty, alpha, cfg.batch_size,
                            device, max_src_len)  # fmt: skip
    lines = list(range(1, len(scores) + 1))
    text = format_scores(scores, cfg.format, lines, candidates)
    write_command_output(cfg.output, text)
    if cfg.rerank is not None:
        best = rerank(scores, candidates, len(sources), cfg.nbest_weight)
        write_output_text(cfg.rerank, "".join(b.replace("\n", " ") + "\n" for b in best))
    total = sum(s.logprob for s in scores)
    tokens = sum(s.length for s in scores)
    ppl = math.exp(-total / tokens) if tokens else float("nan")
    log.info("scored %d translations, %d target subwords (EOS included): log-probability %.2f, perplexity %.3f%s",
             len(scores), tokens, total, ppl, f"; reranked into {cfg.rerank}" if cfg.rerank else "")  # fmt: skip
    return {"pairs": float(len(scores)), "tokens": float(tokens), "logprob": total, "perplexity": ppl}


@command("score")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        try:
            for key in ("ckpt", "src"):
                if OmegaConf.is_missing(cfg, key):
                    raise ConfigError(f"{key} is required: python -m nmt.score ckpt=RUN/checkpoints/best.pt src=SRC tgt=TGT")
            score(cfg)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)


if __name__ == "__main__":
    main()
