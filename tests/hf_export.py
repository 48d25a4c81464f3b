"""Random-init Hugging Face encoders exported by `torch.onnx.export` as a user does it (Hugging
Face's input and output names), for the real-export tests. Importable (in the suite's own
process, transformers 4.x of the `export` extra) and a script (in a child process whose
PYTHONPATH puts transformers 5.x first: `python hf_export.py FAMILY EXPORTER OUT_DIR` prints
the file's path and the transformers version as one JSON line).

Models are built from tiny configs (nothing downloaded). EXPORTER is `torchscript-opset14-
dynamic` (dynamo=False, dynamic batch/sequence axes) or `dynamo-opset18` (dynamic shapes,
weights in FILE.onnx.data).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers

FAMILIES = ("bert", "distilbert", "roberta", "albert", "mobilebert")


def tiny_model(family: str, attn: str | None = None) -> Any:
    t = transformers
    kw: dict[str, Any] = {} if attn is None else {"attn_implementation": attn}
    torch.manual_seed(0)
    if family == "bert":
        return t.BertModel(t.BertConfig(hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=128,
                                        vocab_size=1000, **kw))
    if family == "distilbert":
        return t.DistilBertModel(t.DistilBertConfig(dim=64, n_layers=2, n_heads=4,
                                                    hidden_dim=128, vocab_size=1000, **kw))
    if family == "roberta":
        return t.RobertaModel(t.RobertaConfig(hidden_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=128,
                                              vocab_size=1000, **kw))
    if family == "albert":
        return t.AlbertModel(t.AlbertConfig(hidden_size=64, embedding_size=32,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=128, vocab_size=1000, **kw))
    return t.MobileBertModel(t.MobileBertConfig(
        hidden_size=64, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=512,
        max_position_embeddings=64, **kw))


def export(family: str, exporter: str, out_dir: Path, attn: str | None = None,
           perturb: bool | None = None) -> Path:
    """`family` exported as a user does it. `perturb` (default: for dynamo only): every
    parameter moved off its init value, as a trained model's."""
    model = tiny_model(family, attn).eval()
    if exporter.startswith("dynamo") if perturb is None else perturb:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    names = ["input_ids", "attention_mask"] + ([] if family == "distilbert"
                                               else ["token_type_ids"])
    outputs = ["last_hidden_state"] + ([] if family == "distilbert" else ["pooler_output"])
    ids = torch.randint(3, 500, (1, 16), generator=torch.Generator().manual_seed(2))
    feeds = dict(zip(names, [ids, torch.ones(1, 16, dtype=torch.long),
                             torch.zeros(1, 16, dtype=torch.long)], strict=False))
    path = Path(out_dir) / f"{family}-{exporter}{'-' + attn if attn else ''}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter.startswith("torchscript"):
            axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
            axes.update({n: {0: "batch"} for n in outputs[1:]})
            torch.onnx.export(model, (), str(path), kwargs=feeds, input_names=names,
                              output_names=outputs, opset_version=14, dynamo=False,
                              do_constant_folding=True, dynamic_axes=axes)
        else:
            batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", min=2, max=64)
            torch.onnx.export(model, (), str(path), kwargs=feeds, input_names=names,
                              output_names=outputs, opset_version=18, dynamo=True,
                              dynamic_shapes={n: {0: batch, 1: seq} for n in names})
    return path


if __name__ == "__main__":
    family, exporter, out = sys.argv[1:4]
    # the dynamo exporter reports its steps on stdout: only the JSON line goes there
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    made = export(family, exporter, Path(out))
    real_stdout.write(json.dumps({"path": str(made),
                                  "transformers": transformers.__version__}) + "\n")
