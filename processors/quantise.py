"""int8 model files for ONNX Runtime's CPU provider, built from the pinned fp32 files (issue 40).

Each :class:`Recipe` turns one pinned fp32 file (``processors/models.json``) into its int8 file,
pinned there too (``precision: int8``, ``quantised_from``) and committed in the package:

1. **Prepare** (:func:`prepare`): the batch axis made symbolic where the runtime does so
   (:func:`processors.runtime.symbolic_batch`), the opset raised to 13 (per-channel
   ``DequantizeLinear`` needs its ``axis``), ONNX shape inference and ONNX Runtime's basic graph
   optimisation (``onnxruntime.quantization.shape_inference.quant_pre_process``).
2. **Calibrate**: the inputs are what the model receives when its own processor handles
   calibration uploads made by the project's code (:func:`calibration_uploads`: synthetic card
   scenes, astronaut selfies on walls and drawn people; seeds of their own, never a tuning,
   held-out or ``../shared`` case), recorded with :func:`processors.runtime.recorded_calls`.
   Ranges by min / max (``CalibrationMethod.MinMax``; percentile ranges agreed worse, issue 40).
3. **Quantise** (``quantize_static``): QDQ format, weights int8 symmetric per output channel,
   activations uint8 asymmetric per tensor: the form ONNX Runtime fuses into ``QLinearConv``
   for its x86 u8s8 kernels (AVX-512 VNNI / AVX2). The recipe's ``keep_float`` nodes stay fp32.
   On CPUs without VNNI those kernels saturate for weights outside [-64, 63]; the runtime's
   sessions ask for exact products there (:func:`processors.runtime.exact_int8`).
4. **Pin**: the file's SHA-256 goes into ``models.json``; ``--check`` rebuilds and compares.

Which nodes stay float comes from the per-node sensitivity pass (:func:`trace`): the fully
quantised graph and the fp32 graph run on the same inputs, every tensor's signal-to-quantisation
noise ratio (SQNR, dB) is taken against fp32 (``onnxruntime.quantization.qdq_loss_debug``), and
each node is ranked by how much SQNR it loses between its inputs and its output. In U²-Net-p one
chain stands out in both the card model and rembg's: stage 2d's first 3 x 3 convolution
(``Conv_765``) ends in a ReLU whose one near-constant channel reaches ~228 while the median
channel peaks at ~14, so a per-tensor uint8 scale wipes out the small channels, and the
convolution that reads them (``Conv_787``) falls from 44.6 dB to -6.2 dB; keeping that chain
(``Conv_765``, ``Resize_785``, ``Concat_786``, ``Conv_787``) in float restores the masks.

*The card's tail.* With only that chain in float the card's masks still agreed with fp32 (IoU at
0.5 of 0.9965-0.9994 on the real card photos) but its soft edges did not: where fp32's
normalised map lies between 0.1 and 0.9 the int8 map was off by 6.1-7.3 levels of 255, and the
side refinement reads exactly those levels (``processors.card.detect.OUTWARD_STRIP_MIN``), so
one real card's quad flipped (IoU 0.974 -> 0.899). The card's recipe therefore also keeps
stage 1d (the last decoder RSU-7) and everything after it (the six side outputs and their
fusion) in float, except stage 1d's three full-resolution convolutions (``Conv_810``,
``Conv_812``, ``Conv_942`` and their ReLUs: 10.4 of its 10.7 GMAC per image), which stay int8:
the soft-edge error falls to 3.6-5.1 levels and the bare model keeps 2.25 of the 2.35 x
speed-up (``processors/card/MODEL.md``, *int8*). Keeping only the side outputs and fusion, or
those and stage 1d's last convolution, did not bring the flipped card back; all of stage 1d in
float did, at 54 % of the model's multiply-adds in fp32.

Commands (from the repository root, ``.venv/bin/python``)::

    python -m processors.quantise            # rebuild every int8 file in place; print sha256
    python -m processors.quantise --check    # rebuild to a temporary folder, compare with the pins
    python -m processors.quantise --trace card_u2netp.int8   # the sensitivity pass (JSON lines)
    python -m processors.quantise --trace card_u2netp.int8 --as-built   # what the file still loses

The files are committed rather than built at set-up: their bytes follow the calibration's float
results, which follow the CPU's kernels (MLAS picks AVX-512, AVX2 or SSE code at run time), so a
set-up build could not be pinned by one SHA-256 on every machine; ``--check`` tells whether this
machine rebuilds the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from processors.errors import ModelError
from processors.logs import configure_logging
from processors.models import manifest, model_path
from processors.pixels import jpeg_bytes
from processors.runtime import (
    ModelCall,
    RuntimeSettings,
    exact_int8,
    recorded_calls,
    symbolic_batch,
)

#: Opset the prepared graph is raised to (per-channel DequantizeLinear's ``axis``: opset 13).
OPSET = 13
#: JPEG quality of the calibration uploads (a phone app's upload).
UPLOAD_QUALITY = 90
#: Operators whose outputs the sensitivity pass compares (those the QDQ quantiser handles in
#: U²-Net-p; shape arithmetic is left out).
QUANTISED_OPS = frozenset({"Conv", "Relu", "MaxPool", "Resize", "Concat", "Add", "Sigmoid"})


@dataclass(frozen=True, slots=True)
class Recipe:
    """How one int8 file is built.

    Attributes:
        name: its entry in ``models.json`` (``{source}.int8``).
        source: the pinned fp32 entry it is built from.
        task: the task whose processor makes the calibration inputs (``card``, ``id_photo``).
        model: the :class:`~processors.runtime.BatchedModel` name of ``source`` in that
            processor (its recorded calls are the calibration data).
        uploads: calibration uploads.
        seed: their seed (:func:`calibration_uploads`).
        keep_float: nodes (names in the prepared graph) left in fp32: the sensitivity pass's
            findings (module docstring).
        symbolic: make the batch axis symbolic first (as ``BatchedModel`` loads it).
        float_from: with ``quantised``, the graph's tail left in fp32 (:func:`float_nodes`):
            this node and every quantisable node after it in the prepared graph's order...
        quantised: ...except these, which are quantised all the same.
    """

    name: str
    source: str
    task: str
    model: str
    uploads: int
    seed: int
    keep_float: tuple[str, ...] = ()
    symbolic: bool = True
    float_from: str | None = None
    quantised: tuple[str, ...] = ()


#: U²-Net-p's stage-2d chain (module docstring).
U2NETP_STAGE2D = ("Conv_765", "Resize_785", "Concat_786", "Conv_787")
#: Where the card model's float tail starts: stage 1d (the last decoder RSU-7) and everything
#: after it, the six side outputs and their fusion (module docstring, *the card's tail*).
U2NETP_STAGE1D = "Conv_810"
#: Stage 1d's three full-resolution (320 x 320) convolutions and their ReLUs, quantised all the
#: same: 10.4 of stage 1d's 10.7 GMAC per image (the whole model: 19.8).
U2NETP_STAGE1D_FULL_RES = ("Conv_810", "Relu_811", "Conv_812", "Relu_813", "Conv_942",
                           "Relu_943")

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("card_u2netp.int8", "card_u2netp", "card", "u2netp-card", 64, 20261140,
           U2NETP_STAGE2D, float_from=U2NETP_STAGE1D, quantised=U2NETP_STAGE1D_FULL_RES),
    Recipe("u2netp.int8", "u2netp", "id_photo", "u2netp", 64, 20261141, U2NETP_STAGE2D),
)}
"""The int8 files, by ``models.json`` name."""


def calibration_uploads(task: str, n: int, seed: int) -> list[bytes]:
    """``n`` JPEG uploads (quality :data:`UPLOAD_QUALITY`) that look like ``task``'s real ones,
    deterministic for ``seed``.

    ``card``: :func:`processors.card.training.synth.sample` scenes at the synthesiser's
    phone-like sizes (a tenth without a card, as its sets). ``id_photo``: seven in ten the
    astronaut portrait (mirrored half the time) at 35-100 % of a textured wall's height, turned by
    up to 8 degrees (:func:`processors.idphoto.portraits.place`), the rest a drawn person
    (:func:`processors.card.training.synth.person_backdrop`); 2 MP landscape and portrait frames,
    1024 x 768 and 2000 x 1500.
    """
    from processors.card.training import synth

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if task == "card":
            img = synth.sample(rng, negative=bool(rng.random() < 0.1)).image
        elif task == "id_photo":
            from processors.idphoto.portraits import astronaut_bgr, place

            w, h = [(1600, 1200), (1200, 1600), (1024, 768), (2000, 1500)][int(rng.integers(0, 4))]
            if rng.random() < 0.7:
                person = astronaut_bgr()[:, ::-1] if rng.random() < 0.5 else astronaut_bgr()
                img = place(np.ascontiguousarray(person), w, h, float(rng.uniform(0.35, 1.0)),
                            float(rng.uniform(0.3, 0.7)), float(rng.uniform(-8.0, 8.0)), rng)
            else:
                img = synth.person_backdrop(synth.background(rng, w, h), rng)
        else:
            raise ValueError(f"no calibration uploads for task {task!r}")
        out.append(jpeg_bytes(img, UPLOAD_QUALITY))
    return out


def model_inputs(task: str, uploads: Sequence[bytes]) -> dict[str, list[np.ndarray]]:
    """What each model of ``task``'s processor receives for ``uploads``: model name -> its
    recorded inputs, one ``(1, ...) float32`` array per image (crops and proposals of MTCNN's
    nets one array per call).

    The processor is built with the pinned fp32 files on the CPU, one post-processing thread,
    bucket 1, and handles the uploads one at a time (:func:`processors.runtime.recorded_calls`).
    """
    from processors import registry
    from processors.base import Item
    from processors.decode import DecodeSettings, probe_image

    spec = registry.spec(task)
    runtime = RuntimeSettings(device="cpu", precision="fp32", buckets=(1,), postprocess_threads=1)
    section = spec.settings_model() if spec.settings_model is not None else None
    proc = registry.build_processor(task, section, runtime)
    dec = DecodeSettings()
    calls: list[ModelCall] = []
    with recorded_calls(calls):
        for i, data in enumerate(uploads):
            proc.process_batch([Item(f"cal{i:05d}", probe_image(data, dec))])
    out: dict[str, list[np.ndarray]] = {}
    for c in calls:
        rows = [c.x[k:k + 1] for k in range(len(c.x))] if c.x.shape[0] and _per_image(c) else [c.x]
        out.setdefault(c.model.name, []).extend(rows)
    return out


def _per_image(call: ModelCall) -> bool:
    """Whether a call's rows are images of their own (U²-Net, the card classifier), not the
    crops of one batch (MTCNN's R-Net and O-Net)."""
    return not call.model.name.startswith("mtcnn")


def prepare(src: Path, dst: Path, symbolic: bool = True) -> None:
    """Write the graph ``quantize_static`` starts from (module docstring, step 1) to ``dst``.

    Raises:
        ModelError: ``src`` is not an ONNX model.
    """
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process

    data = src.read_bytes()
    try:
        m = onnx.load_model_from_string(symbolic_batch(data) if symbolic else data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"cannot quantise {src}: not an ONNX model ({type(e).__name__})") from e
    if next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), OPSET) < OPSET:
        m = version_converter.convert_version(m, OPSET)
    with tempfile.TemporaryDirectory(prefix="quantise-") as tmp:
        raised = Path(tmp) / "raised.onnx"
        onnx.save(m, str(raised))
        # onnx shape inference + ORT's basic optimisation; the symbolic pass needs sympy and adds
        # nothing here (the graphs' shapes follow from onnx's own inference)
        quant_pre_process(str(raised), str(dst), skip_symbolic_shape=True)


class _Reader:
    """``CalibrationDataReader`` over recorded inputs (one ``get_next`` per array)."""

    def __init__(self, input_name: str, xs: Sequence[np.ndarray]) -> None:
        self.input_name = input_name
        self.xs = list(xs)
        self.it: Iterator[np.ndarray] = iter(self.xs)

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self.it, None)
        return None if x is None else {self.input_name: x}

    def rewind(self) -> None:
        self.it = iter(self.xs)


def _input_name(path: Path) -> str:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph.input[0].name


def float_nodes(graph: Any, keep_float: Sequence[str] = (), float_from: str | None = None,
                quantised: Sequence[str] = ()) -> list[str]:
    """The nodes of ``graph`` (an ``onnx.GraphProto``, the prepared graph) to leave in fp32:
    ``keep_float``, and with ``float_from`` that node and every later node whose op is in
    :data:`QUANTISED_OPS`, less ``quantised``.

    Raises:
        ModelError: a named node is not in the graph (another ONNX Runtime names its nodes
            differently: run :func:`trace` again).
    """
    names = [n.name for n in graph.node]
    wanted = {*keep_float, *quantised, *([float_from] if float_from else [])}
    missing = sorted(wanted - set(names))
    if missing:
        raise ModelError(f"{graph.name}: nodes to keep in float not in the graph: {missing}")
    out = list(keep_float)
    if float_from is not None:
        out += [n.name for n in graph.node[names.index(float_from):]
                if n.op_type in QUANTISED_OPS and n.name not in set(quantised)
                and n.name not in set(keep_float)]
    return out


def quantise(src: Path, dst: Path, xs: Sequence[np.ndarray], workdir: Path,
             keep_float: Sequence[str] = (), symbolic: bool = True,
             float_from: str | None = None, quantised: Sequence[str] = ()) -> None:
    """Build an int8 file at ``dst`` from the fp32 graph ``src`` and calibration inputs
    (module docstring, steps 1-3).

    Args:
        src: the fp32 ONNX file.
        dst: output file.
        xs: calibration inputs of the graph's first input (:func:`model_inputs`).
        workdir: folder for the prepared graph (``{src.stem}.prepared.onnx``, reused).
        keep_float: nodes (names in the prepared graph) left in fp32.
        symbolic: make the batch axis symbolic first.
        float_from, quantised: a tail of the graph left in fp32 too (:func:`float_nodes`).

    Raises:
        ModelError: ``src`` is not an ONNX model, or a named node is not in the prepared graph
            (:func:`float_nodes`).
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    prepared = workdir / f"{src.stem}.prepared.onnx"
    if not prepared.exists():
        prepare(src, prepared, symbolic)
    keep = float_nodes(onnx.load(str(prepared)).graph, keep_float, float_from, quantised)
    quantize_static(str(prepared), str(dst), _Reader(_input_name(prepared), xs),
                    quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=keep)


def destination(name: str) -> Path:
    """Where ``models.json`` puts the int8 file ``name`` (its ``packaged`` path)."""
    entry = manifest().get(name)
    if entry is None or "packaged" not in entry:
        raise ModelError(f"{name!r} has no packaged entry in processors/models.json")
    return Path(__file__).parent / entry["packaged"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(names: Sequence[str], out: Path | None = None) -> dict[str, dict[str, str | bool]]:
    """Build the int8 files ``names`` (:data:`RECIPES`); into their packaged places, or into
    ``out`` when given (``--check``). Returns ``{name: {"path", "sha256", "pinned"}}``."""
    result: dict[str, dict[str, str | bool]] = {}
    inputs: dict[tuple[str, int, int], dict[str, list[np.ndarray]]] = {}
    with tempfile.TemporaryDirectory(prefix="quantise-") as tmp:
        for name in names:
            r = RECIPES[name]
            key = (r.task, r.uploads, r.seed)
            if key not in inputs:
                inputs[key] = model_inputs(r.task, calibration_uploads(r.task, r.uploads, r.seed))
            dst = (out / Path(destination(name)).name) if out is not None else destination(name)
            dst.parent.mkdir(parents=True, exist_ok=True)
            quantise(model_path(r.source), dst, inputs[key][r.model], Path(tmp), r.keep_float,
                     r.symbolic, r.float_from, r.quantised)
            sha = _sha256(dst)
            pin = manifest().get(name, {}).get("sha256")
            result[name] = {"path": str(dst), "sha256": sha, "pinned": sha == pin}
    return result


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """Signal-to-quantisation-noise ratio (dB) of ``got`` against ``ref``:
    ``10 log10(sum ref^2 / sum (ref - got)^2)`` (inf when equal)."""
    noise = float(np.sum((ref.astype(np.float64) - got) ** 2))
    signal = float(np.sum(ref.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10.0 * np.log10(max(signal, 1e-30) / noise)


def _session(path: Path, tensors: Sequence[str]):  # noqa: ANN202 (onnxruntime's session)
    """A CPU session of the graph at ``path`` that returns ``tensors`` (those it has), and
    their names; int8 products exact, as the runtime's sessions compute them
    (:func:`processors.runtime.exact_int8`), so the sensitivity pass measures the
    quantisation and not a CPU's saturating kernels."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(path))
    known = {o for n in m.graph.node for o in n.output}
    fetch = [t for t in tensors if t in known]
    del m.graph.output[:]
    m.graph.output.extend(onnx.ValueInfoProto(name=t) for t in fetch)
    return ort.InferenceSession(m.SerializeToString(), exact_int8(ort.SessionOptions()),
                                providers=["CPUExecutionProvider"]), fetch


def tensor_snr(ref_path: Path, got_path: Path, tensors: Sequence[str],
               xs: Sequence[np.ndarray]) -> dict[str, float]:
    """SQNR (dB, :func:`snr_db` over all of ``xs``) of each tensor of ``tensors`` that both
    graphs have, ``got_path``'s against ``ref_path``'s; one input at a time (u2netp's node
    outputs take ~250 MiB per image and graph)."""
    ref, fetch_r = _session(ref_path, tensors)
    got, fetch_g = _session(got_path, tensors)
    both = [t for t in fetch_r if t in set(fetch_g)]
    signal = dict.fromkeys(both, 0.0)
    noise = dict.fromkeys(both, 0.0)
    for x in xs:
        a = dict(zip(fetch_r, ref.run(fetch_r, {ref.get_inputs()[0].name: x}), strict=True))
        b = dict(zip(fetch_g, got.run(fetch_g, {got.get_inputs()[0].name: x}), strict=True))
        for t in both:
            r = a[t].astype(np.float64)
            signal[t] += float(np.sum(r * r))
            noise[t] += float(np.sum((r - b[t]) ** 2))
    return {t: float("inf") if noise[t] == 0 else 10.0 * np.log10(max(signal[t], 1e-30) / noise[t])
            for t in both}


def trace(name: str, images: int = 4, seed: int = 20261142, as_built: bool = False
          ) -> list[dict[str, object]]:
    """The per-node sensitivity pass of ``name``'s recipe (module docstring).

    The source is quantised fully (the first pass) or, with ``as_built``, with the recipe's
    nodes in float (what its file still loses); it and its prepared fp32 graph run on the inputs of
    ``images`` uploads of another ``seed``, every node output fetched (in the int8 graph, a
    node's output before its own quantisation); each node's SQNR loss is the lowest SQNR
    (:func:`snr_db`, over all images) of its inputs minus that of its output, a graph input
    counting as exact.

    Returns:
        One row per node, biggest loss first: ``{"node", "op", "sqnr_in_db", "sqnr_out_db",
        "loss_db"}``.
    """
    import onnx

    r = RECIPES[name]
    with tempfile.TemporaryDirectory(prefix="quantise-") as tmp:
        work = Path(tmp)
        cal = model_inputs(r.task, calibration_uploads(r.task, r.uploads, r.seed))[r.model]
        full = work / "full.onnx"
        src = model_path(r.source)
        if as_built:
            quantise(src, full, cal, work, r.keep_float, r.symbolic, r.float_from, r.quantised)
        else:
            quantise(src, full, cal, work, symbolic=r.symbolic)
        xs = model_inputs(r.task, calibration_uploads(r.task, images, seed))[r.model]
        prepared = work / f"{src.stem}.prepared.onnx"
        g = onnx.load(str(prepared)).graph
        consts = {i.name for i in g.initializer}
        exact = {i.name for i in g.input}
        nodes = [n for n in g.node if n.op_type in QUANTISED_OPS]
        tensors = [n.output[0] for n in nodes]
        snr = tensor_snr(prepared, full, tensors, xs)
    rows = []
    for n in nodes:
        ins = [float("inf") if t in exact else snr[t] for t in n.input
               if t in exact or t in snr]
        if n.output[0] not in snr or not ins or all(t in consts for t in n.input):
            continue
        lo, out = min(ins), snr[n.output[0]]
        rows.append({"node": n.name, "op": n.op_type, "sqnr_in_db": round(lo, 1),
                     "sqnr_out_db": round(out, 1), "loss_db": round(lo - out, 1)})
    return sorted(rows, key=lambda row: -float(row["loss_db"]))


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring); exit 1 when ``--check`` finds a file unlike its pin."""
    ap = argparse.ArgumentParser(prog="python -m processors.quantise",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=sorted(RECIPES), help="int8 entries to build")
    ap.add_argument("--check", action="store_true",
                    help="rebuild into a temporary folder and compare with the pins")
    ap.add_argument("--trace", metavar="NAME", help="the per-node sensitivity pass of NAME")
    ap.add_argument("--as-built", action="store_true",
                    help="--trace with the recipe's nodes kept in float (what its file loses)")
    a = ap.parse_args(argv)
    if a.trace:
        for row in trace(a.trace, as_built=a.as_built)[:40]:
            print(json.dumps(row))
        return 0
    unknown = sorted(set(a.names) - set(RECIPES))
    if unknown:
        ap.error(f"unknown int8 entries {unknown}; known: {sorted(RECIPES)}")
    if a.check:
        with tempfile.TemporaryDirectory(prefix="quantise-check-") as tmp:
            res = build(a.names, Path(tmp))
    else:
        res = build(a.names)
    for name, r in res.items():
        print(json.dumps({"name": name, **r}))
    return 0 if not a.check or all(r["pinned"] for r in res.values()) else 1


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    sys.exit(main())
