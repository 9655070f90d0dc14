"""nmt: attentional sequence-to-sequence translation, trained and studied with Hydra configs
(Bahdanau, Cho & Bengio 2014; Luong, Pham & Manning 2015). The commands are ``python -m
nmt.train``, ``nmt.translate``, ``nmt.evaluate`` and ``nmt.demo`` (console scripts ``nmt-train``,
``nmt-translate``, ``nmt-evaluate``, ``nmt-demo``); see README.md. From Python, :class:`nmt.Translator`
(``from nmt import Translator``) translates strings with a checkpoint. Importing the package
loads nothing else until ``Translator`` is first used.
"""

from importlib import metadata

try:
    __version__ = metadata.version("nmt")
except metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    """``nmt.Translator`` and ``nmt.TranslationResult``, imported (with torch) on first use."""
    if name in ("Translator", "TranslationResult"):
        from nmt import translator

        return getattr(translator, name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")


__all__ = ["Translator", "TranslationResult", "__version__"]
