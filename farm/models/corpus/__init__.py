"""The corpus: encoders as users export them, generated (no network), selectable as
`--model corpus:NAME`.

NAME = ``{family}-opset{11|14|17|18}-{fixed|dynamic}[+ortopt][+qdynamic|+qdq|+q4][@small]``
- family: bert, distilbert, roberta, albert (torchscript.py says which exporter pattern);
  ``mobilebert``: the real MobileBERT graph (mobilebert.py), opset 14 or 17, FIXED axes
  only (``mobilebert-opset{14|17}-fixed[+qdynamic|+qdq|+q4][@small]``, no ``+ortopt``;
  mobilebert_export.py says what is not reproduced); bench size is the `mobilebert`
  preset's (24 layers, hidden 512, seq 128), ``@small`` 2 layers, hidden 64, seq 16;
- ``+ortopt``: ORT's transformer optimizer run on it, the real tool
  (`onnxruntime.transformers.optimizer.optimize_model(model_type="bert", opt_level=0)`: its
  Python fusion passes; level 1 first runs an ORT session pass that imports torch);
- ``+qdynamic`` / ``+qdq`` / ``+q4``: ORT's quantize_dynamic, quantize_static (QDQ, MinMax
  calibration on 8 generated feeds) and the 4-bit MatMulNBits quantizer (farm's quantize.py,
  the real tools);
- ``mpnet``, ``deberta`` (v2 with v3's settings), ``squeezebert``, ``electra``, ``xlmr``,
  ``xlmrcls`` (XLM-RoBERTa with its classification head), ``mpnetst`` (MPNet with the
  sentence-transformers head: mean pooling over the mask, L2 normalise): real exports of
  random-init Hugging Face models the way optimum exports them (hf_encoders.py; opset 18
  only, fixed or dynamic axes, ``+qdynamic|+qdq``; needs the `export` extra: torch,
  transformers 4.x);
- ``@small``: test dims (2 layers, hidden 64, seq 16); default bench size (6 layers, hidden
  384, 12 heads, seq 128, vocab 30522).
`corpus_model(name, out_dir) -> Path` builds (cached by name, generator source, ORT version
and quantize.QUANTIZER_REVISION) and returns the file.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import onnx

from farm.errors import BuildError
from farm.models.corpus import hf_encoders, mobilebert_export
from farm.models.corpus.mobilebert_config import MobileBertConfig
from farm.models.corpus.torchscript import BENCH, FAMILIES, SMALL, Dims, export
from farm.models.quantize import QUANTIZER_REVISION

PREFIX = "corpus:"
_NAME = re.compile(r"^(?P<family>[a-z]+)-opset(?P<opset>\d+)-(?P<axes>fixed|dynamic)"
                   r"(?P<tools>(\+(ortopt|qdynamic|qdq|q4))*)(?P<size>@small|@bench)?$")
QUANT_TOOLS = {"qdynamic": "int8-dynamic", "qdq": "int8-qdq", "q4": "int4"}
OPSETS = (11, 14, 17, 18)  # 18: the dynamo pattern (torchscript.py)


def names(size: str = "@small") -> list[str]:
    """Every corpus name (fp32 exports and the tool variants the tests use)."""
    out = []
    for fam in FAMILIES:
        for opset in OPSETS:
            for axes in ("fixed", "dynamic"):
                base = f"{fam}-opset{opset}-{axes}"
                out += [base + t + size for t in ("", "+ortopt", "+qdynamic", "+qdq", "+q4")]
    for opset in mobilebert_export.OPSETS:
        out += [f"mobilebert-opset{opset}-fixed{t}{size}" for t in ("", "+qdynamic", "+qdq", "+q4")]
    return out


def hf_names(size: str = "@small") -> list[str]:
    """The issue-28 Hugging Face exports (hf_encoders.py): kept out of `names()`, whose every
    file tests/kernels/test_corpus_matrix.py runs (these need torch to build; that test takes
    a chosen few of them)."""
    return [f"{fam}-opset18-{axes}{t}{size}" for fam in hf_encoders.FAMILIES
            for axes in ("fixed", "dynamic") for t in ("", "+qdynamic", "+qdq")]


def _hint() -> str:
    return ("use corpus:{bert|distilbert|roberta|albert}-opset{11|14|17|18}-{fixed|dynamic}"
            "[+ortopt][+qdynamic|+qdq|+q4][@small] or "
            "corpus:mobilebert-opset{14|17}-fixed[+qdynamic|+qdq|+q4][@small] or "
            "corpus:{mpnet|deberta|squeezebert|electra|xlmr|xlmrcls|mpnetst}-opset18-"
            "{fixed|dynamic}[+qdynamic|+qdq][@small]")


def parse(name: str) -> tuple[str, int, bool, list[str], Dims | MobileBertConfig]:
    m = _NAME.match(name)
    mobilebert = m is not None and m["family"] == "mobilebert"
    hf = m is not None and m["family"] in hf_encoders.FAMILIES
    if not m or not (mobilebert or hf or m["family"] in FAMILIES):
        raise BuildError(f"unknown corpus model {name!r}", hint=_hint())
    opset, dynamic = int(m["opset"]), m["axes"] == "dynamic"
    tools = [t for t in m["tools"].split("+") if t]
    if sum(t in QUANT_TOOLS for t in tools) > 1 or tools.count("ortopt") > 1:
        raise BuildError(f"corpus model {name!r}: at most one quantizer and one ortopt",
                         hint=_hint())
    if mobilebert:
        if opset not in mobilebert_export.OPSETS or dynamic or "ortopt" in tools:
            raise BuildError(
                f"corpus model {name!r}: MobileBERT is reproduced at opset 14 or 17 with fixed "
                "axes and without ORT's optimizer (farm/models/corpus/"
                "mobilebert_export.py says why)", hint=_hint())
        small = m["size"] == "@small"
        return "mobilebert", opset, False, tools, (mobilebert_export.SMALL if small
                                                   else mobilebert_export.BENCH)
    if hf and (opset != 18 or "ortopt" in tools or "q4" in tools):
        raise BuildError(f"corpus model {name!r}: the Hugging Face exports are opset 18, "
                         "with +qdynamic or +qdq only", hint=_hint())
    if opset not in OPSETS:
        raise BuildError(f"unknown corpus model {name!r}", hint=_hint())
    dims = SMALL if m["size"] == "@small" else BENCH
    return m["family"], opset, dynamic, tools, dims


def _key(name: str) -> str:
    import onnxruntime

    # the quantizers' options live in quantize.py, outside this package: its revision keys
    # the `+qdynamic|+qdq|+q4` files as it keys the presets' (models/build.py)
    digest = hashlib.sha256(name.encode() + onnxruntime.__version__.encode()
                            + QUANTIZER_REVISION.encode())
    for p in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(p.read_bytes())
    return digest.hexdigest()[:12]


def _ortopt(src: Path, dst: Path, dims: Dims) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        opt = optimize_model(str(src), model_type="bert", num_heads=dims.heads,
                             hidden_size=dims.hidden, opt_level=0)
        opt.save_model_to_file(str(dst))
    finally:
        logging.getLogger().setLevel(level)


def corpus_model(name: str, out_dir: Path) -> Path:
    family, opset, dynamic, tools, dims = parse(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = name.replace("+", "_").replace("@", "_")
    final = out_dir / f"corpus-{safe}-{_key(name)}.onnx"
    if final.is_file():
        return final
    path = out_dir / f".corpus-{safe}-{_key(name)}-fp32.onnx"
    if isinstance(dims, MobileBertConfig):
        onnx.save(mobilebert_export.export_mobilebert(dims, opset), str(path))
    elif family in hf_encoders.FAMILIES:
        onnx.save(hf_encoders.export(family, dims, dynamic), str(path))
    else:
        onnx.save(export(family, dims, opset, dynamic), str(path))
    for tool in tools:
        nxt = path.with_name(path.stem + f"-{tool}.onnx")
        if tool == "ortopt":
            assert isinstance(dims, Dims)  # parse refuses +ortopt for mobilebert
            _ortopt(path, nxt, dims)
        else:
            from farm.models.inputs import CALIBRATION_SEEDS, make_inputs
            from farm.models.quantize import quantize

            calibration = None
            if tool == "qdq":
                fixed = {i.name: [1, dims.seq] for i in onnx.load(str(path)).graph.input}
                calibration = [make_inputs(path, s, fixed) for s in CALIBRATION_SEEDS]
            quantize(path, QUANT_TOOLS[tool], nxt, calibration)
        path = nxt
    path.replace(final)
    return final
