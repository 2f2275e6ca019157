"""The wheels and model files a GPU machine without network needs for ``benchmarks/gpu.sh``,
trimmed, compressed and cut into parts that each fit one transfer.

The device machine (see ``benchmarks/README.md``, GPU) has Python 3.12, PyTorch 2.11 with
NVIDIA's CUDA 13 / cuDNN 9 wheels, NumPy, OpenCV, Pillow, ONNX, scikit-image and pytest
(:data:`DEVICE_IMAGE`), but neither ONNX Runtime's CUDA build, nvImageCodec nor this project's
smaller dependencies, and it reaches no package index. What it lacks is downloaded here (``pip
download``, cp312 manylinux x86-64), then:

- ``onnxruntime-gpu`` 1.31.1 (CUDA 13, cuDNN 9; 256 MB): the CUDA kernels of every GPU
  architecture but Hopper's (sm_90; ``--keep-arch``, 0 keeps them all) are zeroed in
  ``libonnxruntime_providers_cuda.so`` (its ``.nv_fatbin`` section). Each entry header stays,
  so the CUDA runtime still finds the sm_90 image of every kernel by architecture and never
  reads a zeroed one on an H100/H200. ``libonnxruntime.so`` (the C API library, 28 MB) is left
  out: the Python binding links it not (``readelf -d``: libc, libstdc++ and friends only).
- ``nvidia-nvimgcodec-cu13`` 0.9.0.20: the Python binding for cp312 and the nvJPEG and
  libjpeg-turbo extensions only; ``nvidia-nvjpeg`` 13.0.1.86 (libnvjpeg.so.13, CUDA 13.0).
- pydantic, structlog, simplejpeg, pillow-heif, the OpenTelemetry API and what they need, at
  this checkout's versions (:data:`PROJECT`; ``tests/unit/test_gpu_kit.py`` checks that every
  distribution the GPU run imports is in the image or in the kit).
- the model files of the model home (``processors/models.json`` entries that are not packaged:
  rembg's ``u2netp.onnx`` and the three MTCNN nets of the ID-photo face search, each pinned by
  SHA-256); the card's own weights travel inside the working tree.

Every wheel is rewritten with its members stored, and every file compressed with xz (LZMA,
preset 6): the sm_90 cubins that deflate leaves at 86 MB take 50 MB so, and the whole kit fits
in two parts of at most ``--part-mib`` (big files in chunks, reassembled, decompressed and
checked by SHA-256 on the machine, Python's standard library only).

    python -m benchmarks.gpu_kit build     # .gpukit/parts/part1, part2 (once; 2-15 min here)
    python -m benchmarks.gpu_kit cut       # again into parts, from what build packed

Then two device calls in a row, no step here between them (each carries one part folder, which
``benchmarks/gpu.sh`` keeps in ``/tmp`` while the machine stays warm): ``benchmarks/gpu.sh
stage`` carrying ``.gpukit/parts/part1``, and ``benchmarks/gpu.sh`` carrying
``.gpukit/parts/part2``. Wheels are never committed (``.gpukit/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / ".gpukit"

PINS = {
    "onnxruntime-gpu": "1.31.1",
    "nvidia-nvimgcodec-cu13": "0.9.0.20",
    "nvidia-nvjpeg": "13.0.1.86",
}
"""GPU wheels: onnxruntime-gpu 1.31.1 is built for CUDA 13 and cuDNN 9 (its CUDA provider
links libcudart.so.13, libcublas.so.13, libcudnn.so.9; its TensorRT provider libnvinfer.so.10),
nvImageCodec's cu13 build loads libnvjpeg.so.13."""

PROJECT = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection",
           "pydantic-settings", "python-dotenv", "structlog", "simplejpeg", "pillow-heif",
           "opentelemetry-api")
"""The project's dependencies the device image lacks (imported by ``processors``); their
versions are this checkout's virtual environment's."""

DEVICE_IMAGE = ("numpy", "opencv-python-headless", "onnx", "protobuf", "ml-dtypes", "pillow",
                "scikit-image", "scipy", "rich", "pygments", "markdown-it-py", "mdurl", "attrs",
                "typing-extensions", "pytest")
"""Distributions the GPU run imports that the device machine's image already holds (this
workplace's CUDA image, package list read on 2026-11-17; its plain ``onnxruntime`` is the CPU
build, shadowed by the kit's ``onnxruntime-gpu``)."""

DROP = ("onnxruntime/capi/libonnxruntime.so",)
"""Wheel members (name prefixes) left out of the kit: not loaded by the Python binding."""

PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64")

FATBIN_MAGIC = 0xBA55ED50
"""``__nv_fatbin`` header magic (CUDA fat binary container)."""


def prune_fatbins(data: bytearray, keep_arch: int) -> tuple[int, int]:
    """Zero the payload of every cubin entry whose SM architecture is not ``keep_arch`` in the
    fat binaries found in ``data`` (an ELF file's bytes), in place; headers are kept.

    Fat binary layout (as written by nvcc's fatbinary and read by the CUDA runtime): a 16-byte
    header (``u32`` magic 0xBA55ED50, ``u16`` version, ``u16`` header size, ``u64`` size of the
    entries), then entries: ``u16`` kind (1 PTX, 2 cubin), ``u16`` version, ``u32`` header size,
    ``u64`` payload size, ..., ``u32`` SM architecture at byte 28 of the entry header, then the
    payload.

    Returns:
        ``(kept_bytes, zeroed_bytes)`` of cubin payloads.
    """
    kept = zeroed = 0
    p = 0
    while (p := data.find(struct.pack("<I", FATBIN_MAGIC), p)) >= 0:
        _, _, hsize, fsize = struct.unpack_from("<IHHQ", data, p)
        q, end = p + hsize, p + hsize + fsize
        if hsize < 16 or end > len(data):
            p += 4
            continue
        while q + 32 <= end:
            kind, _, ehsize, psize = struct.unpack_from("<HHIQ", data, q)
            arch = struct.unpack_from("<I", data, q + 28)[0]
            if ehsize < 32 or q + ehsize + psize > end:
                break
            body = q + ehsize
            if kind == 2 and arch != keep_arch:
                data[body:body + psize] = bytes(psize)
                zeroed += psize
            else:
                kept += psize
            q = body + psize
        p = end
    return kept, zeroed


def _record_line(name: str, payload: bytes) -> str:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(payload)}"


def rewrite_wheel(src: Path, dst: Path, keep: Callable[[str], bool],
                  edit: Callable[[str, bytes], bytes] | None = None,
                  compression: int = zipfile.ZIP_DEFLATED) -> None:
    """Copy wheel ``src`` to ``dst`` with only the members ``keep(name)`` accepts, each passed
    through ``edit(name, bytes)`` when given, and a RECORD that matches (PEP 376 / 427);
    members written with ``compression`` (``zipfile.ZIP_STORED`` when the whole wheel is
    compressed again, better, as one stream)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression,
                                                      compresslevel=9) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in zin.infolist():
            if info.filename == record_name or not keep(info.filename):
                continue
            payload = zin.read(info)
            if edit is not None:
                payload = edit(info.filename, payload)
            zout.writestr(info, payload, compress_type=compression)
            lines.append(_record_line(info.filename, payload))
        lines.append(f"{record_name},,")
        zout.writestr(record_name, "\n".join(lines) + "\n")


def _download(names: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + names, check=True)


def _installed_version(name: str) -> str:
    from importlib import metadata

    return metadata.version(name)


def _keep(wheel: str) -> Callable[[str], bool]:
    """Which members of ``wheel`` (a file name) the kit keeps."""
    if wheel.startswith("nvidia_nvimgcodec_"):
        def keep(n: str) -> bool:
            if "nvimgcodec_impl.cpython-" in n:
                return "cpython-312-" in n
            if "/extensions/" in n:
                return "libnvjpeg_ext" in n or "libjpeg_turbo_ext" in n
            return "/tools/" not in n

        return keep
    return lambda n: not n.startswith(DROP)


def pack(src: Path, dst: Path) -> None:
    """``dst`` = ``src`` compressed with xz (LZMA2, preset 6: a 8 MiB dictionary, 9 MiB to
    decompress), in 16 MiB reads."""
    with open(src, "rb") as fin, lzma.open(dst, "wb", preset=6) as fout:
        while chunk := fin.read(16 << 20):
            fout.write(chunk)


def build(part_mib: float, keep_arch: int, kit: Path = KIT) -> dict:
    """Download, trim, store, compress, cut into parts; returns the manifest (also written to
    ``kit/manifest.json``)."""
    dl, wheels, packed = kit / "download", kit / "wheels", kit / "packed"
    for d in (dl, wheels, packed):
        d.mkdir(parents=True, exist_ok=True)
    pins = dict(PINS) | {n: _installed_version(n) for n in PROJECT}
    _download([f"{n}=={v}" for n, v in pins.items()], dl)
    for old in [*wheels.glob("*"), *packed.glob("*")]:
        old.unlink()
    sizes: dict[str, dict] = {}
    for whl in sorted(dl.glob("*.whl")):
        out = wheels / whl.name
        stats: dict[str, int] = {}

        def edit(name: str, payload: bytes, stats: dict = stats) -> bytes:
            if not name.endswith("libonnxruntime_providers_cuda.so") or keep_arch == 0:
                return payload
            buf = bytearray(payload)
            stats["kept_cubin_bytes"], stats["zeroed_cubin_bytes"] = prune_fatbins(buf, keep_arch)
            return bytes(buf)

        rewrite_wheel(whl, out, _keep(whl.name), edit, compression=zipfile.ZIP_STORED)
        sizes[whl.name] = {"downloaded": whl.stat().st_size, **stats}
    models = kit / "models"
    models.mkdir(exist_ok=True)
    from processors.models import manifest, model_path

    for name, entry in manifest().items():
        if "packaged" not in entry:  # the model home's files
            shutil.copy2(model_path(name), models / entry["file"])
    for f in [*wheels.glob("*.whl"), *models.glob("*")]:
        pack(f, packed / f"{f.name}.xz")
        sizes.setdefault(f.name, {})["carried"] = (packed / f"{f.name}.xz").stat().st_size
    return cut(part_mib, pins, sizes, kit)


def _rel(f: Path) -> str:
    """A kit file's name in the manifest (``models/`` for the model home's files)."""
    return ("models/" if f.parent.name == "models" else "") + f.name


def cut(part_mib: float, pins: dict, sizes: dict, kit: Path = KIT) -> dict:
    """Assign the kit's files (``kit/wheels/*.whl``, ``kit/models/*``, each compressed in
    ``kit/packed/<name>.xz``) to as few parts of at most ``part_mib`` MiB as they need, of equal
    size, in ``kit/parts/partN`` (a larger file in chunks), each part with the manifest (each
    file's SHA-256 and size, its compressed SHA-256, chunk order) that :func:`assemble`
    follows."""
    files = sorted([*(kit / "wheels").glob("*.whl"), *(kit / "models").glob("*")],
                   key=lambda p: -(kit / "packed" / f"{p.name}.xz").stat().st_size)
    total = sum((kit / "packed" / f"{f.name}.xz").stat().st_size for f in files)
    # as few parts as part_mib allows, of equal size: the most room left for the working tree
    count = max(1, -(-total // int(part_mib * 2**20)))
    limit = -(-total // count)
    parts_dir = kit / "parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts: list[list[tuple[Path, str, int, int]]] = [[]]  # (packed file, name, start, length)
    room = limit
    for f in files:
        xz = kit / "packed" / f"{f.name}.xz"
        size, start, k = xz.stat().st_size, 0, 0
        while start < size:
            if room <= 0:
                parts.append([])
                room = limit
            n = min(room, size - start)
            name = xz.name if (start == 0 and n == size) else f"{xz.name}.chunk{k:02d}"
            parts[-1].append((xz, name, start, n))
            start, room, k = start + n, room - n, k + 1
    manifest = {"pins": pins, "sizes": sizes, "parts": len(parts), "files": {}}
    for f in files:
        xz = kit / "packed" / f"{f.name}.xz"
        manifest["files"][_rel(f)] = {
            "bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
            "xz_bytes": xz.stat().st_size, "xz_sha256": hashlib.sha256(xz.read_bytes()).hexdigest(),
            "chunks": []}
    by_xz = {f"{f.name}.xz": _rel(f) for f in files}
    for i, part in enumerate(parts, 1):
        pdir = parts_dir / f"part{i}"
        pdir.mkdir(parents=True)
        for xz, name, start, n in part:
            with open(xz, "rb") as src:
                src.seek(start)
                (pdir / name).write_bytes(src.read(n))
            chunk = {"part": i, "name": name, "bytes": n}
            manifest["files"][by_xz[xz.name]]["chunks"].append(chunk)
    for i in range(1, len(parts) + 1):
        (parts_dir / f"part{i}" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    return h.hexdigest()


def assemble(kit: Path) -> Path:
    """On the device machine: rebuild every file of the kit's manifest in ``kit/assembled``
    from the parts carried so far (``benchmarks/gpu.sh stage`` copies each into ``kit``):
    chunks joined, the compressed file checked against its SHA-256, decompressed, the file
    checked against its own. A file already assembled and intact is left as it is. Standard
    library only.

    Returns:
        The ``assembled`` folder (wheels, and ``models/``: ``u2netp.onnx``, ``mtcnn_*.onnx``).

    Raises:
        SystemExit: no manifest, parts missing (named), or a file whose SHA-256 differs.
    """
    man = kit / "manifest.json"
    if not man.is_file():
        raise SystemExit(f"gpu_kit: no kit in {kit} (manifest.json missing)")
    m = json.loads(man.read_text())
    out_dir = kit / "assembled"
    todo = {rel: f for rel, f in m["files"].items()
            if not ((out_dir / rel).is_file() and (out_dir / rel).stat().st_size == f["bytes"]
                    and _sha256(out_dir / rel) == f["sha256"])}
    missing = sorted({c["part"] for f in todo.values() for c in f["chunks"]
                      if not (kit / c["name"]).is_file()})
    if missing:
        raise SystemExit(f"gpu_kit: kit incomplete: part(s) {missing} of {m['parts']} not carried "
                         "yet; carry each part folder (.gpukit/parts/partN) in a call of "
                         "`benchmarks/gpu.sh stage`, the machine still warm")
    for rel, f in todo.items():
        out = out_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        xz = out.with_name(out.name + ".xz")
        with open(xz, "wb") as w:
            for c in f["chunks"]:
                w.write((kit / c["name"]).read_bytes())
        if _sha256(xz) != f["xz_sha256"]:
            raise SystemExit(f"gpu_kit: {rel}.xz does not match its SHA-256 after reassembly")
        with lzma.open(xz) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        xz.unlink()
        if _sha256(out) != f["sha256"]:
            raise SystemExit(f"gpu_kit: {rel} does not match its SHA-256 after decompression")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_kit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download, trim, compress and cut the kit into .gpukit/parts")
    b.add_argument("--part-mib", type=float, default=52.0,
                   help="largest part (MiB); the transfer limit is 64 MiB with the working tree")
    b.add_argument("--keep-arch", type=int, default=90,
                   help="SM architecture whose CUDA kernels are kept (90: H100/H200; "
                        "0: keep every architecture, about 3 parts)")
    c = sub.add_parser("cut", help="cut what build packed into parts again (another --part-mib)")
    c.add_argument("--part-mib", type=float, default=52.0)
    r = sub.add_parser("assemble", help="(device) rebuild and check the kit's files in KIT")
    r.add_argument("kit", type=Path)
    a = ap.parse_args(argv)
    if a.cmd in ("build", "cut"):
        if a.cmd == "build":
            m = build(a.part_mib, a.keep_arch)
        else:
            old = json.loads((KIT / "manifest.json").read_text())
            m = cut(a.part_mib, old["pins"], old["sizes"])
        print(json.dumps({"parts": m["parts"], "part_mib": [
            round(sum(c["bytes"] for f in m["files"].values() for c in f["chunks"]
                      if c["part"] == i) / 2**20, 1) for i in range(1, m["parts"] + 1)]}))
    else:
        print(assemble(a.kit))


if __name__ == "__main__":
    main()
