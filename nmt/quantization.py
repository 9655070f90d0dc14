"""Dynamic int8 quantization of a trained model, for translating on a CPU.

``precision=int8`` swaps the model's linear layers and the encoder's GRU for their dynamically
quantized versions (``torch.ao.quantization.quantize_dynamic``):

- each weight matrix is stored as int8 with one scale per tensor, 4x smaller than fp32;
- at every call the input is quantized to int8 on the fly, with a scale from its own range, the
  product is computed in int8 with int32 accumulation (fbgemm / x86 kernels, or qnnpack on ARM),
  and the result is turned back into fp32.

Everything else stays fp32: the embeddings, the attention's weighted sums and softmax, the decoder's
gate arithmetic and the output softmax. The scores therefore move a little (rounding each weight
to one of 255 levels), and a beam may now and then choose another hypothesis. A quantized model
translates only: it is neither trained nor saved as a checkpoint.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt.errors import ConfigError

PRECISIONS = ("fp32", "int8")
# Weights read directly rather than through the module's forward: left in fp32. Bahdanau's score
# vector v is a (1, A) weight multiplied as a vector (nmt.attention.BahdanauAttention.score).
KEEP_FP32 = ("energy",)


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse an unknown precision, or int8 anywhere but on the CPU (one line naming the key)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "int8" and device.type != "cpu":
        raise ConfigError(f"precision=int8 runs on the CPU only, not {device}; give device=cpu")


def quantized_modules(model: nn.Module) -> list[str]:
    """The names of the modules that ``int8`` quantizes: every ``nn.Linear`` and ``nn.GRU`` but
    those of :data:`KEEP_FP32`."""
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear | nn.GRU) and name.rsplit(".", 1)[-1] not in KEEP_FP32]  # fmt: skip


def quantize(model: nn.Module, precision: str) -> nn.Module:
    """The model at ``precision``: itself for ``fp32``, a dynamically quantized copy for ``int8``
    (the model given is left as it is). Call it on a model in eval mode, on the CPU."""
    check_precision(precision, torch.device("cpu"))
    if precision == "fp32":
        return model
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    spec = dict.fromkeys(quantized_modules(model), default_dynamic_qconfig)
    with warnings.catch_warnings():  # torch.ao's notice that the API moves to torchao; it works as documented
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        return quantize_dynamic(model.eval(), spec, dtype=torch.qint8, inplace=False)
