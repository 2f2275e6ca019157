"""The GPU machine's kit (trim, compress, cut into parts, reassemble) and ``benchmarks/gpu.sh``'s
refusals; every distribution the GPU run imports is in the device image or in the kit."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.gpu_kit import (
    DEVICE_IMAGE,
    FATBIN_MAGIC,
    PINS,
    PROJECT,
    _keep,
    assemble,
    cut,
    pack,
    prune_fatbins,
    rewrite_wheel,
)

ROOT = Path(__file__).resolve().parents[2]


def _fatbin(entries: list[tuple[int, int, bytes]]) -> bytes:
    """A fat binary: 16-byte header, then (kind, arch, payload) entries with 64-byte headers."""
    body = b""
    for kind, arch, payload in entries:
        head = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload)) + bytes(12)
        head += struct.pack("<I", arch) + bytes(64 - 32)
        body += head + payload
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def test_prune_zeroes_other_architectures_and_keeps_headers() -> None:
    elf = bytearray(b"\x7fELF" + bytes(60) + _fatbin([(2, 80, b"A" * 100), (2, 90, b"B" * 50),
                                                       (1, 80, b"ptx!" * 5)])
                    + bytes(8) + _fatbin([(2, 120, b"C" * 30)]))
    before = len(elf)
    kept, zeroed = prune_fatbins(elf, keep_arch=90)
    assert (kept, zeroed) == (50 + 20, 100 + 30)
    assert len(elf) == before
    assert b"B" * 50 in elf and b"ptx!" * 5 in elf  # sm_90 cubin and PTX untouched
    assert b"A" not in elf and b"C" not in elf
    assert elf.count(struct.pack("<I", FATBIN_MAGIC)) == 2


def test_rewrite_wheel_filters_edits_stores_and_records(tmp_path: Path) -> None:
    src = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("pkg/a.so", b"aaaa")
        z.writestr("pkg/b_cp311.so", b"bbbb")
        z.writestr("pkg-1.0.dist-info/RECORD", "stale\n")
    out = tmp_path / "out.whl"
    rewrite_wheel(src, out, lambda n: "cp311" not in n, lambda n, b: b.upper(),
                  compression=zipfile.ZIP_STORED)
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == ["pkg-1.0.dist-info/RECORD", "pkg/a.so"]
        assert z.read("pkg/a.so") == b"AAAA"
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        record = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
    assert record[0].startswith("pkg/a.so,sha256=") and record[0].endswith(",4")
    assert record[1] == "pkg-1.0.dist-info/RECORD,,"


def test_the_kit_leaves_out_what_the_python_binding_never_loads() -> None:
    ort = _keep("onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert ort("onnxruntime/capi/libonnxruntime_providers_cuda.so")
    assert ort("onnxruntime/capi/onnxruntime_pybind11_state.cpython-312-x86_64-linux-gnu.so")
    assert not ort("onnxruntime/capi/libonnxruntime.so.1.31.1")
    nv = _keep("nvidia_nvimgcodec_cu13-0.9.0.20-py3-none-manylinux_2_28_x86_64.whl")
    assert nv("nvidia/nvimgcodec/nvimgcodec_impl.cpython-312-x86_64-linux-gnu.so")
    assert not nv("nvidia/nvimgcodec/nvimgcodec_impl.cpython-311-x86_64-linux-gnu.so")
    assert nv("nvidia/nvimgcodec/extensions/libnvjpeg_ext.so.0")
    assert not nv("nvidia/nvimgcodec/extensions/libnvtiff_ext.so.0")


def _kit(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    kit = tmp_path / "kit"
    for d in ("wheels", "models", "packed"):
        (kit / d).mkdir(parents=True)
    files = {"wheels/big-1.0-py3-none-any.whl": os.urandom(3 * 2**20 + 123),
             "wheels/small-1.0-py3-none-any.whl": b"s" * 1000,
             "models/u2netp.onnx": b"m" * 50000}
    for rel, data in files.items():
        (kit / rel).write_bytes(data)
        pack(kit / rel, kit / "packed" / f"{Path(rel).name}.xz")
    return kit, files


def test_parts_fit_the_limit_and_reassemble_byte_for_byte(tmp_path: Path) -> None:
    kit, files = _kit(tmp_path)
    m = cut(1.0, {"big": "1.0"}, {}, kit)
    assert m["parts"] == 4  # the random 3 MiB do not compress
    assert m["files"]["models/u2netp.onnx"]["xz_bytes"] < 1000  # what compresses does
    for part in sorted((kit / "parts").iterdir()):
        payload = sum(f.stat().st_size for f in part.iterdir() if f.name != "manifest.json")
        assert payload <= 2**20
    device = tmp_path / "device"
    device.mkdir()
    for part in sorted((kit / "parts").iterdir())[:-1]:  # one call per part
        for f in part.iterdir():
            (device / f.name).write_bytes(f.read_bytes())
    with pytest.raises(SystemExit, match=r"part\(s\) \[4\] of 4"):
        assemble(device)
    for f in sorted((kit / "parts").iterdir())[-1].iterdir():
        (device / f.name).write_bytes(f.read_bytes())
    out = assemble(device)
    for rel, data in files.items():
        dst = out / Path(rel).name if rel.startswith("wheels") else out / rel
        assert dst.read_bytes() == data
    assert not list(out.glob("*.xz"))
    for f in device.glob("*.chunk*"):  # parts gone (a fresh /tmp would have them again)
        f.unlink()
    assert assemble(device) == out  # intact files are left as they are
    (out / "big-1.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(SystemExit, match=r"part\(s\) \[1, 2, 3, 4\]"):
        assemble(device)


def test_a_damaged_chunk_is_refused_by_its_sha256(tmp_path: Path) -> None:
    kit, _ = _kit(tmp_path)
    cut(64.0, {}, {}, kit)
    (part,) = (kit / "parts").iterdir()
    device = tmp_path / "device"
    device.mkdir()
    for f in part.iterdir():
        (device / f.name).write_bytes(f.read_bytes())
    small = device / "small-1.0-py3-none-any.whl.xz"
    small.write_bytes(small.read_bytes()[:-1] + b"\0")
    with pytest.raises(SystemExit,
                       match="small-1.0-py3-none-any.whl.xz does not match its SHA-256"):
        assemble(device)


def test_every_distribution_the_gpu_run_imports_is_in_the_image_or_the_kit() -> None:
    """What ``benchmarks/gpu.sh`` runs on the device imports nothing the device lacks: each
    distribution of the modules loaded is in the image (:data:`DEVICE_IMAGE`), the kit
    (:data:`PROJECT`, :data:`PINS`) or the project itself."""
    code = ("import importlib.metadata as md, json, os, sys\n"
            "before = set(sys.modules)\n"
            "import benchmarks.gpu_sweep, benchmarks.gpu_smoke, benchmarks.gpu_kit\n"
            "import processors.card.processor, processors.idphoto.processor\n"
            "import processors.gpu.backend, benchmarks.parity, processors.card.training.synth\n"
            "files = {os.path.realpath(m.__file__) for n, m in list(sys.modules.items())\n"
            "         if n not in before and getattr(m, '__file__', None)}\n"
            "owners = set()\n"
            "for d in md.distributions():\n"
            "    for f in d.files or ():\n"
            "        if str(f).endswith('.py') and os.path.realpath(f.locate()) in files:\n"
            "            owners.add(d.metadata['Name'])\n"
            "            break\n"
            "print(json.dumps(sorted(owners)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, check=True)

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    # structlog imports greenlet inside ``try: ... except ImportError`` (absent on the device)
    optional = ("greenlet",)
    have = {norm(n) for n in (*DEVICE_IMAGE, *PROJECT, *PINS, *optional, "cardstream",
                              "onnxruntime")}
    loaded = {norm(d) for d in json.loads(r.stdout)}
    assert {"opentelemetry-api", "numpy", "structlog", "onnxruntime"} <= loaded
    assert loaded - have == set()


def _gpu_sh(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run([str(ROOT / "benchmarks" / "gpu.sh"), *args], capture_output=True,
                          text=True, timeout=60, env={**base, **(env or {})})


def test_gpu_sh_usage_and_unknown_arguments() -> None:
    r = _gpu_sh("--help")
    assert r.returncode == 0 and "benchmarks/gpu.sh --dry-run" in r.stderr
    r = _gpu_sh("--fast")
    assert r.returncode == 2 and "unknown argument '--fast'" in r.stderr


def test_gpu_sh_fails_clearly_without_a_cuda_device(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"  # a driver that lists no GPU
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    smi.chmod(0o755)
    r = _gpu_sh(env={"PATH": f"{fake_bin}:/usr/bin:/bin", "OUT": str(tmp_path / "out")})
    assert r.returncode == 3
    assert "no CUDA device" in r.stderr and r.stdout == ""


def test_gpu_sh_stage_keeps_the_carried_parts(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    (parts / "part2").mkdir(parents=True)
    (parts / "part2" / "manifest.json").write_text(json.dumps({"parts": 2, "files": {}}))
    (parts / "part2" / "big.whl.xz.chunk01").write_bytes(b"x")
    r = _gpu_sh("stage", env={"KIT_DIR": str(tmp_path / "kit"), "KIT_PARTS": str(parts)})
    assert r.returncode == 0 and "kept part2 (2 file(s))" in r.stderr
    assert sorted(p.name for p in (tmp_path / "kit").iterdir()) == ["big.whl.xz.chunk01",
                                                                   "manifest.json"]
    r = _gpu_sh("stage", env={"KIT_DIR": str(tmp_path / "kit"),
                              "KIT_PARTS": str(tmp_path / "none")})
    assert r.returncode == 0 and "carried no kit part" in r.stderr
