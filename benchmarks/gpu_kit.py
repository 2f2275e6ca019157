"""The wheels and model files a GPU machine without network needs for ``benchmarks/gpu.sh``,
trimmed and cut into parts that each fit one transfer.

The device machine (see ``benchmarks/README.md``, GPU) has Python 3.12, PyTorch 2.11 with
NVIDIA's CUDA 13 / cuDNN 9 wheels, NumPy, OpenCV, Pillow, ONNX, scikit-image and pytest, but
neither ONNX Runtime's CUDA build, nvImageCodec nor this project's smaller dependencies, and it
reaches no package index. What it lacks is downloaded here (``pip download``, cp312 manylinux
x86-64), then:

- ``onnxruntime-gpu`` 1.31.1 (CUDA 13, cuDNN 9; 256 MB): the CUDA kernels of every GPU
  architecture but Hopper's (sm_90; ``--keep-arch``, 0 keeps them all) are zeroed in
  ``libonnxruntime_providers_cuda.so`` (its ``.nv_fatbin`` section: 218 MB of cubins, 77 MB of them
  sm_90, already compressed). Each entry header stays, so the CUDA runtime still finds the sm_90
  image of every kernel by architecture and never reads a zeroed one on an H100/H200; the zeros
  compress away in the wheel. Built for another GPU, pass ``--keep-arch``.
- ``nvidia-nvimgcodec-cu13`` 0.9.0.20 (25 MB): the Python binding for cp312 and the nvJPEG and
  libjpeg-turbo extensions only; ``nvidia-nvjpeg`` 13.0.1.86 (libnvjpeg.so.13, CUDA 13.0).
- pydantic, structlog, simplejpeg, pillow-heif and what they need, at this checkout's versions.
- the model files of the model home (``processors/models.json`` entries that are not packaged:
  rembg's ``u2netp.onnx`` and the three MTCNN nets of the ID-photo face search, each pinned by
  SHA-256); the card's own weights travel inside the working tree.

The whole is larger than one transfer (64 MiB with the working tree), so it is cut into parts of
at most ``--part-mib`` (big files in chunks, reassembled and checked by SHA-256 on the machine).

    python -m benchmarks.gpu_kit build            # .gpukit/: wheels, parts, manifest.json
    python -m benchmarks.gpu_kit stage 1          # .whl/ <- part 1 (carry .whl in the call)

Then, on the device machine, one call per part: ``benchmarks/gpu.sh stage`` for every part but
the last (each call keeps its part in /tmp while the machine stays warm), and ``benchmarks/gpu.sh``
with the last one. Wheels are never committed (``.gpukit/`` and ``.whl/`` are git-ignored).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / ".gpukit"
CARRY = ROOT / ".whl"

PINS = {
    "onnxruntime-gpu": "1.31.1",
    "nvidia-nvimgcodec-cu13": "0.9.0.20",
    "nvidia-nvjpeg": "13.0.1.86",
}
"""GPU wheels: onnxruntime-gpu 1.31.1 is built for CUDA 13 and cuDNN 9 (its CUDA provider
links libcudart.so.13, libcublas.so.13, libcudnn.so.9; its TensorRT provider libnvinfer.so.10),
nvImageCodec's cu13 build loads libnvjpeg.so.13."""

PROJECT = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection",
           "pydantic-settings", "python-dotenv", "structlog", "simplejpeg", "pillow-heif")
"""The project's dependencies the device image lacks (imported by ``processors``); their
versions are this checkout's virtual environment's."""

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
                  edit: Callable[[str, bytes], bytes] | None = None) -> None:
    """Copy wheel ``src`` to ``dst`` with only the members ``keep(name)`` accepts, each passed
    through ``edit(name, bytes)`` when given, and a RECORD that matches (PEP 376 / 427)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED,
                                                      compresslevel=9) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in zin.infolist():
            if info.filename == record_name or not keep(info.filename):
                continue
            payload = zin.read(info)
            if edit is not None:
                payload = edit(info.filename, payload)
            zout.writestr(info, payload, compress_type=zipfile.ZIP_DEFLATED)
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


def build(part_mib: float, keep_arch: int, kit: Path = KIT) -> dict:
    """Download, trim, cut into parts; returns the manifest (also written to
    ``kit/manifest.json``)."""
    dl, wheels = kit / "download", kit / "wheels"
    for d in (dl, wheels):
        d.mkdir(parents=True, exist_ok=True)
    pins = dict(PINS) | {n: _installed_version(n) for n in PROJECT}
    _download([f"{n}=={v}" for n, v in pins.items()], dl)
    for old in wheels.glob("*"):
        old.unlink()
    sizes: dict[str, dict] = {}
    for whl in sorted(dl.glob("*.whl")):
        out = wheels / whl.name
        if whl.name.startswith("onnxruntime_gpu-"):
            stats = {}

            def edit(name: str, payload: bytes, stats=stats) -> bytes:
                if not name.endswith("libonnxruntime_providers_cuda.so") or keep_arch == 0:
                    stats.setdefault("kept", 0)
                    stats.setdefault("zeroed", 0)
                    return payload
                buf = bytearray(payload)
                stats["kept"], stats["zeroed"] = prune_fatbins(buf, keep_arch)
                return bytes(buf)

            rewrite_wheel(whl, out, lambda n: True, edit)
            sizes[whl.name] = {"downloaded": whl.stat().st_size, "kept_cubin_bytes": stats["kept"],
                               "zeroed_cubin_bytes": stats["zeroed"]}
        elif whl.name.startswith("nvidia_nvimgcodec_"):
            def keep(n: str) -> bool:
                if "nvimgcodec_impl.cpython-" in n:
                    return "cpython-312-" in n
                if "/extensions/" in n:
                    return "libnvjpeg_ext" in n or "libjpeg_turbo_ext" in n
                return "/tools/" not in n

            rewrite_wheel(whl, out, keep)
            sizes[whl.name] = {"downloaded": whl.stat().st_size}
        else:
            shutil.copy2(whl, out)
            sizes[whl.name] = {"downloaded": whl.stat().st_size}
        sizes[whl.name]["carried"] = out.stat().st_size
    models = kit / "models"
    models.mkdir(exist_ok=True)
    from processors.models import manifest, model_path

    for name, entry in manifest().items():
        if "packaged" not in entry:  # the model home's files
            shutil.copy2(model_path(name), models / entry["file"])
    return cut(part_mib, pins, sizes, kit)


def cut(part_mib: float, pins: dict, sizes: dict, kit: Path = KIT) -> dict:
    """Assign the kit's files (``kit/wheels/*.whl``, ``kit/models/*``) to parts of at most
    ``part_mib`` MiB in ``kit/parts/partN`` (a larger file in chunks), each part with the
    manifest (file sizes, SHA-256, chunk order) that :func:`assemble` follows."""
    limit = int(part_mib * 2**20)
    files = sorted([*(kit / "wheels").glob("*.whl"), *(kit / "models").glob("*")],
                   key=lambda p: -p.stat().st_size)
    parts_dir = kit / "parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts: list[list[tuple[Path, str, int, int]]] = [[]]  # (file, name in part, start, length)
    room = limit
    for f in files:
        size, start, k = f.stat().st_size, 0, 0
        while start < size:
            if room <= 0:
                parts.append([])
                room = limit
            n = min(room, size - start)
            name = f.name if (start == 0 and n == size) else f"{f.name}.chunk{k:02d}"
            parts[-1].append((f, name, start, n))
            start, room, k = start + n, room - n, k + 1
    manifest = {"pins": pins, "sizes": sizes, "parts": len(parts), "files": {}}
    for f in files:
        rel = ("models/" if f.parent.name == "models" else "") + f.name
        manifest["files"][rel] = {"bytes": f.stat().st_size,
                                  "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
                                  "chunks": []}
    for i, part in enumerate(parts, 1):
        pdir = parts_dir / f"part{i}"
        pdir.mkdir(parents=True)
        for f, name, start, n in part:
            with open(f, "rb") as src:
                src.seek(start)
                (pdir / name).write_bytes(src.read(n))
            rel = ("models/" if f.parent.name == "models" else "") + f.name
            manifest["files"][rel]["chunks"].append({"part": i, "name": name, "bytes": n})
    for i in range(1, len(parts) + 1):
        (parts_dir / f"part{i}" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def assemble(kit: Path) -> Path:
    """On the device machine: rebuild every file of the kit's manifest in ``kit/assembled`` from
    the parts carried so far (``benchmarks/gpu.sh stage`` copies each into ``kit``) and check it
    against its SHA-256. Standard library only.

    Returns:
        The ``assembled`` folder (wheels, and ``models/``: ``u2netp.onnx``, ``mtcnn_*.onnx``).

    Raises:
        SystemExit: no manifest, parts missing (named), or a file whose SHA-256 differs.
    """
    man = kit / "manifest.json"
    if not man.is_file():
        raise SystemExit(f"gpu_kit: no kit in {kit} (manifest.json missing)")
    m = json.loads(man.read_text())
    missing = sorted({c["part"] for f in m["files"].values() for c in f["chunks"]
                      if not (kit / c["name"]).is_file()})
    if missing:
        raise SystemExit(f"gpu_kit: kit incomplete: part(s) {missing} of {m['parts']} not carried "
                         "yet; carry each (python -m benchmarks.gpu_kit stage N) with "
                         "`benchmarks/gpu.sh stage`")
    out_dir = kit / "assembled"
    for rel, f in m["files"].items():
        out = out_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if not (out.is_file() and hashlib.sha256(out.read_bytes()).hexdigest() == f["sha256"]):
            out.write_bytes(b"".join((kit / c["name"]).read_bytes() for c in f["chunks"]))
        if hashlib.sha256(out.read_bytes()).hexdigest() != f["sha256"]:
            raise SystemExit(f"gpu_kit: {rel} does not match its SHA-256 after reassembly")
    return out_dir


def stage(n: int) -> Path:
    """Replace ``.whl/`` (the folder a device call carries) with part ``n`` of the kit."""
    src = KIT / "parts" / f"part{n}"
    if not src.is_dir():
        raise SystemExit(f"gpu_kit: no part {n} (run `python -m benchmarks.gpu_kit build`)")
    shutil.rmtree(CARRY, ignore_errors=True)
    shutil.copytree(src, CARRY)
    return CARRY


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_kit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download, trim and cut the kit into .gpukit/parts")
    b.add_argument("--part-mib", type=float, default=52.0,
                   help="largest part (MiB); the transfer limit is 64 MiB with the working tree")
    b.add_argument("--keep-arch", type=int, default=90,
                   help="SM architecture whose CUDA kernels are kept (90: H100/H200; "
                        "0: keep every architecture, about 5 parts)")
    s = sub.add_parser("stage", help="put part N into .whl/ for the next device call")
    s.add_argument("n", type=int)
    r = sub.add_parser("assemble", help="(device) rebuild and check the kit's files in KIT")
    r.add_argument("kit", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        m = build(a.part_mib, a.keep_arch)
        print(json.dumps({"parts": m["parts"], "sizes": m["sizes"]}))
    elif a.cmd == "assemble":
        print(assemble(a.kit))
    else:
        print(stage(a.n))


if __name__ == "__main__":
    main()
