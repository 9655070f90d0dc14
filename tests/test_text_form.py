"""Text forms (nmt.text_form): ``lowercase_tokenized`` lower-cases and splits words and
punctuation as the Hansards gold set is tokenized, writes French contractions out on a French side,
is idempotent and keeps the gold set's own words; and the commands that read a checkpoint's split
or align with it read the text in the checkpoint's form."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nmt.align import check_reverse, sentences_in_form
from nmt.data.text import DataError, ParallelText, parallel_in_text_form
from nmt.errors import ConfigError
from nmt.evaluate import split_text
from nmt.text_form import TEXT_FORMS, check_text_form, in_text_form, tokenize

# made-up lines written as the gold set writes its own: lower-cased but for names, tokenized, French
# contractions written out; the form changes only their case
GOLD_STYLE = [
    ("Mr. Speaker , the hon. member 's question -- at 2 p.m. -- cost $ 98,355 or 6.42 % ( No. 5 ) .", "en"),
    ("i can not say ... « well » , St. John 's is .5 of it !", "en"),
    ("M. le Orateur , souvenons - nous que ce est le unité de le ouest ; aujourd' hui à 2.8c .", "fr"),
    ("il ne y a pas de le accord à les députés , au - dessus de les autres ?", "fr"),
]


@pytest.mark.parametrize(("raw", "lang", "formed"), [
    ("Mr. Smith's 1,500 ice-cream cones -- aren't they?", "en", "mr. smith 's 1,500 ice - cream cones -- are n't they ?"),
    ("We're at 5 p.m.; U.S. no. 5 said no.", "en", "we 're at 5 p.m. ; u.s. no. 5 said no ."),
    ("O'Brien's 'best' students' books…", "en", "o ' brien 's ' best ' students ' books ..."),
    ("L'homme qu'il voit au bord du lac, aujourd'hui.", "fr", "le homme que il voit à le bord de le lac , aujourd' hui ."),
    ("Des gens jouent aux cartes au-dessus d’un pont.", "fr", "de les gens jouent à les cartes au - dessus de un pont ."),
    ("Des enfants jouent aux cartes.", "de", "des enfants jouent aux cartes ."),  # French rules on French sides only
])  # fmt: skip
def test_lowercase_tokenized_splits_words_and_punctuation_as_the_gold_set(raw: str, lang: str, formed: str) -> None:
    assert tokenize(raw, lang) == formed
    assert tokenize(formed, lang) == formed, "idempotent"


@pytest.mark.parametrize(("line", "lang"), GOLD_STYLE)
def test_the_gold_sets_own_lines_only_change_case(line: str, lang: str) -> None:
    assert tokenize(line, lang) == line.lower()


@pytest.mark.parametrize("form", TEXT_FORMS)
def test_every_form_keeps_the_lines_and_as_is_keeps_the_text(form: str) -> None:
    lines = ["Ein Hund, der läuft.", "", "  two  spaces "]
    formed = in_text_form(lines, form, "de")
    assert len(formed) == len(lines) and in_text_form(formed, form, "de") == formed
    assert (formed == lines) == (form == "as_is")
    text = parallel_in_text_form(ParallelText(lines, lines, "a", "b"), form, "de", "fr")
    assert (text.src, text.src_path, text.tgt_path) == (formed, "a", "b")


def test_an_unknown_form_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="data.text_form='lower': choose one of as_is, lowercase_tokenized"):
        check_text_form("lower")


# --------------------------------------------------------------------------- commands reading a checkpoint's text


def _data(form: str, src_lang: str = "en", tgt_lang: str = "fr", **more):
    return OmegaConf.create({"text_form": form, "src_lang": src_lang, "tgt_lang": tgt_lang, **more})


def test_align_reads_the_sentences_in_the_checkpoints_form(caplog) -> None:
    sources, targets = ["Mr. Speaker , the Hon. member"], ["M. le Orateur , le député"]
    assert sentences_in_form(_data("as_is"), sources, targets, keep_words=True) == (sources, targets)
    formed = sentences_in_form(_data("lowercase_tokenized"), sources, targets, keep_words=True)
    assert formed == (["mr. speaker , the hon. member"], ["m. le orateur , le député"])
    assert sentences_in_form(_data("lowercase_tokenized"), sources, None, keep_words=True)[1] is None
    with pytest.raises(DataError, match="line 2: .* the target has 4 words, not 2, so gold links"):
        sentences_in_form(_data("lowercase_tokenized"), ["a", "b"], ["x", "du lac."], keep_words=True)
    with caplog.at_level(logging.WARNING, logger="nmt.align"):
        _, targets = sentences_in_form(_data("lowercase_tokenized"), ["a", "b"], ["x", "du lac."], keep_words=False)
    assert targets == ["x", "de le lac ."] and "1 target sentences have other words" in caplog.text


def test_a_reverse_model_must_read_the_same_form() -> None:
    cfg = OmegaConf.create({"ckpt": "f.pt", "reverse_ckpt": "r.pt"})
    forward = OmegaConf.create({"data": _data("lowercase_tokenized")})
    check_reverse(cfg, forward, OmegaConf.create({"data": _data("lowercase_tokenized", "fr", "en")}))
    with pytest.raises(ConfigError, match="r.pt was trained on text in the form as_is, ckpt=f.pt in lowercase_tokenized"):
        check_reverse(cfg, forward, OmegaConf.create({"data": _data("as_is", "fr", "en")}))


def test_a_checkpoints_multi30k_split_comes_in_its_form(tmp_path: Path) -> None:
    for lang, lines in (("en", ["A Dog's life.", "Two men"]), ("fr", ["La vie d'un chien.", "Deux hommes"])):
        (tmp_path / f"val.{lang}.gz").write_bytes(gzip.compress("".join(f"{x}\n" for x in lines).encode()))
    data = _data("lowercase_tokenized", kind="multi30k", cache_dir=str(tmp_path / "cache"), test_splits=["val"])
    text = split_text(data, "val", str(tmp_path))
    assert (text.src, text.tgt) == (["a dog 's life .", "two men"], ["la vie de un chien .", "deux hommes"])
    data.text_form = "as_is"
    assert split_text(data, "val", str(tmp_path)).src == ["A Dog's life.", "Two men"]
