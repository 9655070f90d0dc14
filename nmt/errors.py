"""The errors a user can fix, and the one way every command reports them.

:class:`ConfigError`, :class:`DataError` and :class:`CheckpointError` carry one line that names the
key, file or line and says what to do. :func:`command_errors` wraps a command's work: such an error
(or a ``ValueError`` from a setting, or Hydra's instantiation error) becomes that one line and exit
status 2; a failure of the machine (a full disk, memory exhausted, a non-finite loss) one line and
status 1; a second
Ctrl-C status 130. No traceback in any of these cases.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from hydra.errors import InstantiationException

USAGE_ERROR, FAILURE, INTERRUPTED = 2, 1, 130


class ConfigError(ValueError):
    """An invalid config value; the message names the key, the value and the accepted values."""


class DataError(ValueError):
    """Bad or missing input data; the message names the file, line or key and what to do."""


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, truncated, corrupt, foreign or of another version, or that
    cannot be written (e.g. the disk is full)."""


OUT_OF_MEMORY = ("out of memory ({}): when training, lower data.max_tokens and raise train.accum_steps by the "
                 "same factor (a run continues from checkpoints/last.pt with train.resume=auto); when translating, "
                 "evaluating or scoring, lower batch_size")  # fmt: skip


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says an allocation failed: ``MemoryError``, torch's ``OutOfMemoryError``
    (a GPU), or the CPU allocator's ``RuntimeError`` ("can't allocate memory")."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    return isinstance(error, RuntimeError) and ("can't allocate memory" in str(error) or "out of memory" in str(error))


def instantiation_message(error: InstantiationException) -> str:
    """One line for Hydra's multi-line ``InstantiationException``: the config key, the class, and
    the constructor's own message, e.g. ``model.attention (nmt.attention.LuongDotAttention): ...``."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    key = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("full_key:")), "")
    target = lines[0].split("'")[1] if lines and lines[0].count("'") >= 2 else ""
    where = f"{key} ({target})" if key and target else key or target or "instantiate"
    cause = error.__cause__
    what = str(cause) if cause is not None else " ".join(lines)
    return f"{where}: {' '.join(what.split())}"


@contextmanager
def command_errors(log: logging.Logger, interrupted: str = "interrupted") -> Iterator[None]:
    """Report what goes wrong inside the block as one line on ``log`` and exit (see module docstring).

    :param interrupted: the line for a KeyboardInterrupt that reaches the block's end, unless it
        carries its own (``KeyboardInterrupt("interrupted: OUT.partial holds ...")``).
    """
    try:
        yield
    except InstantiationException as e:
        log.error("%s", instantiation_message(e))
        sys.exit(USAGE_ERROR)
    except (ConfigError, DataError, CheckpointError, ValueError) as e:
        log.error("%s", " ".join(str(e).split()))
        sys.exit(USAGE_ERROR)
    except (OSError, FloatingPointError) as e:
        log.error("%s", " ".join(str(e).split()))
        sys.exit(FAILURE)
    except (MemoryError, RuntimeError) as e:  # torch.OutOfMemoryError is a RuntimeError; so is the CPU allocator's
        if not out_of_memory(e):
            raise
        log.error("%s", OUT_OF_MEMORY.format(" ".join(str(e).split())[:200] or type(e).__name__))
        sys.exit(FAILURE)
    except KeyboardInterrupt as e:  # a command may say what it kept: KeyboardInterrupt("...")
        log.error("%s", str(e) or interrupted)
        sys.exit(INTERRUPTED)
