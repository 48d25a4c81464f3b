"""Hugging Face encoders beyond BERT's pattern (issue 28), random-init, exported the way
optimum's ONNX exporter does it: `optimum.exporters.onnx.main_export` runs TorchScript
`torch.onnx.export` (dynamo=False), opset 18, dynamic batch/sequence axes, Hugging Face's
input and output names. optimum is not a dependency: its exporter is this call with a config
per family. Checked against optimum 2.1.0 + optimum-onnx 0.1.0 (the versions that accept
transformers 4.57; PyPI, tried outside the venv): for MPNet, DeBERTa-v2 and SqueezeBERT the
canonical files (farm's front-end) of its exports and of these have the same op histogram
(its raw files carry Identity nodes of shared weights the front-end drops).

Needs the `export` extra (torch, transformers 4.x); imported only when such a corpus name
is built. Families (`corpus:{family}-opset18-{fixed|dynamic}[+qdynamic|+qdq][@small]`):
- ``mpnet``: relative position bias added to the scores (the all-mpnet sentence models);
- ``deberta``: DeBERTa-v2 with v3's settings (relative attention, log buckets, shared keys,
  c2p + p2c): disentangled attention, relative-position gathers;
- ``squeezebert``: grouped 1x1 convolutions over the sequence;
- ``electra``: BERT's shape with a factorised embedding;
- ``xlmr``: XLM-RoBERTa (RoBERTa's position ids); ``xlmrcls``: with its classification head;
- ``mpnetst``: ``mpnet`` with the sentence-transformers head (all-mpnet-base-v2,
  all-MiniLM-L6-v2 as exported for a sentence embedding): mean pooling over the attention
  mask, then L2 normalisation, one output ``sentence_embedding`` [batch, hidden] (the
  exporter leaves hidden symbolic; optimum's sentence-transformers config also returns
  ``token_embeddings``, left out: the embedding is what such a model is run for).
Dims: torchscript.SMALL (2 layers, hidden 64, seq 16) or BENCH (6 layers, hidden 384, 12
heads, seq 128, vocab 30522), random weights moved off their init values."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import onnx

from farm.models.corpus.torchscript import Dims

FAMILIES = ("mpnet", "deberta", "squeezebert", "electra", "xlmr", "xlmrcls", "mpnetst")


def tiny_model(family: str, dims: Dims) -> Any:
    import torch
    import transformers as t

    torch.manual_seed(dims.seed)
    kw = dict(hidden_size=dims.hidden, num_hidden_layers=dims.layers,
              num_attention_heads=dims.heads, intermediate_size=dims.ffn,
              vocab_size=dims.vocab, max_position_embeddings=dims.max_pos)
    if family in ("mpnet", "mpnetst"):
        return t.MPNetModel(t.MPNetConfig(**kw))
    if family == "deberta":
        return t.DebertaV2Model(t.DebertaV2Config(
            **kw, relative_attention=True, position_buckets=min(256, dims.seq * 2),
            max_relative_positions=dims.max_pos, pos_att_type=["p2c", "c2p"],
            norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
            type_vocab_size=0))
    if family == "squeezebert":
        return t.SqueezeBertModel(t.SqueezeBertConfig(
            **kw, embedding_size=dims.hidden, q_groups=4, k_groups=4, v_groups=4,
            post_attention_groups=1, intermediate_groups=4, output_groups=4))
    if family == "electra":
        return t.ElectraModel(t.ElectraConfig(**kw, embedding_size=dims.embed))
    if family == "xlmr":
        return t.XLMRobertaModel(t.XLMRobertaConfig(**kw))
    if family == "xlmrcls":
        return t.XLMRobertaForSequenceClassification(t.XLMRobertaConfig(**kw, num_labels=3))
    raise ValueError(family)


def sentence_embedding(tokens: Any, attention_mask: Any) -> Any:
    """sentence-transformers' Pooling (mean tokens) then Normalize, as their modules compute
    them (models/Pooling.py, models/Normalize.py): the mask expanded to the tokens' shape and
    dtype, its sum clamped at 1e-9, F.normalize's p=2 over dim 1 (its norm clamped at 1e-12)."""
    import torch

    mask = attention_mask.unsqueeze(-1).expand(tokens.size()).to(tokens.dtype)
    summed = torch.sum(tokens * mask, 1)
    mean = summed / torch.clamp(mask.sum(1), min=1e-9)
    return torch.nn.functional.normalize(mean, p=2, dim=1)


def _output(family: str) -> str:
    if family.endswith("cls"):
        return "logits"
    return "sentence_embedding" if family.endswith("st") else "last_hidden_state"


def export(family: str, dims: Dims, dynamic: bool = True) -> onnx.ModelProto:
    """`family` as optimum's exporter writes it (fixed axes at dims.seq when not dynamic)."""
    import torch

    hf = tiny_model(family, dims).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # off the init values, as a trained model's
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)

    class FirstOutput(torch.nn.Module):
        """The task's one output, as optimum's export configs declare it (feature extraction:
        last_hidden_state; classification: logits), so a model's pooler is not exported; a
        sentence-transformers family's: the pooled, normalised sentence_embedding."""

        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kw = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            out = self.hf(input_ids=input_ids, attention_mask=attention_mask, **kw,
                          return_dict=False)[0]
            return sentence_embedding(out, attention_mask) if family.endswith("st") else out

    model = FirstOutput().eval()
    names = ["input_ids", "attention_mask"] + (["token_type_ids"]
                                               if family in ("squeezebert", "electra") else [])
    output = _output(family)
    ids = torch.randint(3, min(500, dims.vocab), (1, dims.seq),
                        generator=torch.Generator().manual_seed(2))
    feeds = dict(zip(names, [ids, torch.ones(1, dims.seq, dtype=torch.long),
                             torch.zeros(1, dims.seq, dtype=torch.long)], strict=False))
    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    axes[output] = ({0: "batch_size", 1: "sequence_length"} if output == "last_hidden_state"
                    else {0: "batch_size"})
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(d) / "model.onnx"
        torch.onnx.export(model, (), str(path), kwargs=feeds, input_names=names,
                          output_names=[output], opset_version=18, dynamo=False,
                          do_constant_folding=True, dynamic_axes=axes if dynamic else None)
        return onnx.load(str(path))
