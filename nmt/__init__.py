"""nmt: attentional sequence-to-sequence translation, trained and studied with Hydra configs
(Bahdanau, Cho & Bengio 2014; Luong, Pham & Manning 2015). The commands are ``python -m
nmt.train``, ``nmt.translate`` and ``nmt.evaluate`` (console scripts ``nmt-train``,
``nmt-translate``, ``nmt-evaluate``); see README.md. Importing the package loads nothing else.
"""

from importlib import metadata

try:
    __version__ = metadata.version("nmt")
except metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
