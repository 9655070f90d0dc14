"""The forms a corpus's text is read in (``data.text_form``): ``as_is``, the lines as given, or
``lowercase_tokenized``, the form of the English-French Hansards word-alignment gold set (Och and
Ney 2000; the HLT-NAACL 2003 shared task, Mihalcea and Pedersen 2003), so that a model or a
statistical aligner reads the gold set's sentences in the form of the rest of its training text.

``lowercase_tokenized`` lower-cases a line and puts one space between its words and punctuation
marks, keeping as one token what the gold set keeps:

    "Mr. Smith's 1,500 ice-cream cones -- aren't they?"
    -> "mr. smith 's 1,500 ice - cream cones -- are n't they ?"

numbers with ``.`` or ``,`` inside, titles before a word (``mr.``, ``hon.``, ``m.``), dotted
initials (``p.m.``), runs of dashes and dots, English clitics (``'s``, ``n't``) and elided words
(``l'``, ``qu'``, ``aujourd'``); a hyphen is a token of its own. A French side (language ``fr``)
is also decontracted word by word as the gold set is, whatever the sense: ``l'`` -> ``le``,
``d'`` -> ``de``, ``qu'`` -> ``que`` ..., ``au`` -> ``à le``, ``aux`` -> ``à les``, ``du`` ->
``de le``, ``des`` -> ``de les`` (not before a hyphen: ``au - dessus``). The form is idempotent,
and the gold set's own lines keep their words: only their case changes.
"""

from __future__ import annotations

import re
import unicodedata

AS_IS, LOWERCASE_TOKENIZED = "as_is", "lowercase_tokenized"
TEXT_FORMS = (AS_IS, LOWERCASE_TOKENIZED)
# bump when a form's rules change, so that text cached in the old form is made again
TEXT_FORM_VERSION = 1

TITLES = ("mr", "mrs", "ms", "dr", "st", "hon", "messrs", "jr", "sr", "m", "mm", "mme", "mlle")
ELIDED = ("l", "d", "j", "m", "n", "s", "t", "c", "qu", "jusqu", "lorsqu", "puisqu", "quoiqu", "presqu", "quelqu",
          "aujourd")  # fmt: skip
CLITICS = ("s", "re", "ve", "ll", "d", "m")  # English 's 're 've 'll 'd 'm
# One token, tried in this order at each position (the first alternative that matches wins):
TOKEN = re.compile(
    r"(?:[^\W\d_]\.){2,}"  # dotted initials: p.m., u.s.
    rf"|(?:{'|'.join(TITLES)})\.(?=\s+\S)"  # a title before a word: mr. smith
    r"|no\.(?=\s*\d)"  # no. 5
    r"|\d+(?:[.,]\d+)+\w*|(?<![\w.])\.\d+"  # 1,500  6.42  2.8c  .5
    r"|-{2,}|\.{2,}"  # -- ...
    r"|\w+?(?=n't(?!\w))|n't(?!\w)"  # are n't
    rf"|'(?:{'|'.join(CLITICS)})(?!\w)"  # smith 's
    rf"|(?:{'|'.join(ELIDED)})'"  # l' homme, aujourd' hui (another apostrophe is a mark: o ' clock)
    r"|\w+"  # a word
    r"|[^\w\s]",  # any other mark, alone
    re.UNICODE,
)
# typographic apostrophes as ', the ellipsis character as three dots
NORMALIZE = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2026": "..."})
# a French token -> its written-out form (aujourd' stays: aujourd' hui)
FRENCH = {f"{word}'": f"{word}e" for word in ELIDED if word != "aujourd"}
FRENCH.update({"au": "à le", "aux": "à les", "du": "de le", "des": "de les"})


def check_text_form(form: str) -> str:
    """:return: ``form``. :raise ValueError: a form not in :data:`TEXT_FORMS`, naming the choices."""
    if form not in TEXT_FORMS:
        raise ValueError(f"data.text_form={form!r}: choose one of {', '.join(TEXT_FORMS)}")
    return form


def tokenize(line: str, lang: str | None = None) -> str:
    """``line`` in the ``lowercase_tokenized`` form (this module's docstring): lower-cased words
    and punctuation marks, one space apart; French contractions written out when ``lang`` is ``fr``."""
    text = unicodedata.normalize("NFC", line).translate(NORMALIZE).lower()
    tokens = TOKEN.findall(text)
    if lang == "fr":
        tokens = [FRENCH.get(token, token) if k + 1 == len(tokens) or tokens[k + 1] != "-" else token
                  for k, token in enumerate(tokens)]  # fmt: skip
    return " ".join(tokens)


def in_text_form(lines: list[str], form: str, lang: str | None) -> list[str]:
    """``lines`` of language ``lang`` in ``form`` (one of :data:`TEXT_FORMS`)."""
    if check_text_form(form) == AS_IS:
        return list(lines)
    return [tokenize(line, lang) for line in lines]


