"""MobileBERT as a corpus model: the real graph of mobilebert.py, exported as a user's file.

`export_mobilebert(config, opset) -> onnx.ModelProto` is what the TorchScript
`torch.onnx.export(MobileBertModel, (input_ids, attention_mask, token_type_ids),
opset_version=14|17, do_constant_folding=True)` writes with FIXED axes (no dynamic_axes):
the op pattern mobilebert.py's docstring derives. Every op that graph uses (Gather, Slice,
Pad, Concat, MatMul, Add, Mul, Sub, Div, Reshape, Transpose, Softmax, Relu, Unsqueeze with
axes as an input, Cast, Constant) has the same definition at opset 14 and 17, so the opset-14
file is the same graph under a lower opset import (checked by the ONNX checker).

Not reproduced (refused by `corpus.parse` with a hint): dynamic axes (the `Shape` chains
the exporter would write for the trigram Slice/Pad, the position slice and the head
reshapes), opset 11 (attribute-form Unsqueeze), the dynamo exporter (opset 18), and ORT's
transformer optimizer (`+ortopt`: its bert fusions key on LayerNorm, which MobileBERT has none of).
"""

from __future__ import annotations

import onnx

from farm.models.corpus.mobilebert import OPSET, build_mobilebert
from farm.models.corpus.mobilebert_config import MobileBertConfig

# small enough for a fast suite, every structural feature kept (4 FFNs, trigram, shared
# Q/K bottleneck; K % 32 == 0 for the custom route's 4-bit blocks); same as the tests' SMALL
SMALL = MobileBertConfig(layers=2, hidden=64, embedding=32, bottleneck=32, heads=2,
                         intermediate=64, seq=16, vocab=512, max_positions=64)
BENCH = MobileBertConfig()  # google/mobilebert-uncased at seq 128: the `mobilebert` preset
OPSETS = (14, 17)


def export_mobilebert(config: MobileBertConfig, opset: int) -> onnx.ModelProto:
    if opset not in OPSETS:
        raise ValueError(f"mobilebert corpus opset {opset}: only {OPSETS} are reproduced")
    model = build_mobilebert(config)
    if opset != OPSET:
        model.opset_import[0].version = opset
        onnx.checker.check_model(model, full_check=True)
    return model
