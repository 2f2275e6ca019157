"""The GPU machine's kit (trim, cut into parts, reassemble) and ``benchmarks/gpu.sh``'s refusals."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from benchmarks.gpu_kit import FATBIN_MAGIC, assemble, cut, prune_fatbins, rewrite_wheel

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


def test_rewrite_wheel_filters_edits_and_records(tmp_path: Path) -> None:
    src = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("pkg/a.so", b"aaaa")
        z.writestr("pkg/b_cp311.so", b"bbbb")
        z.writestr("pkg-1.0.dist-info/RECORD", "stale\n")
    out = tmp_path / "out.whl"
    rewrite_wheel(src, out, lambda n: "cp311" not in n, lambda n, b: b.upper())
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == ["pkg-1.0.dist-info/RECORD", "pkg/a.so"]
        assert z.read("pkg/a.so") == b"AAAA"
        record = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
    assert record[0].startswith("pkg/a.so,sha256=") and record[0].endswith(",4")
    assert record[1] == "pkg-1.0.dist-info/RECORD,,"


def test_parts_fit_the_limit_and_reassemble_byte_for_byte(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    (kit / "wheels").mkdir(parents=True)
    (kit / "models").mkdir()
    big = os.urandom(3 * 2**20 + 123)
    (kit / "wheels" / "big-1.0-py3-none-any.whl").write_bytes(big)
    (kit / "wheels" / "small-1.0-py3-none-any.whl").write_bytes(b"s" * 1000)
    (kit / "models" / "u2netp.onnx").write_bytes(b"m" * 5000)
    m = cut(1.0, {"big": "1.0"}, {}, kit)
    assert m["parts"] == 4
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
    assert (out / "big-1.0-py3-none-any.whl").read_bytes() == big
    assert (out / "models" / "u2netp.onnx").read_bytes() == b"m" * 5000
    (device / "big-1.0-py3-none-any.whl.chunk01").write_bytes(b"x" * 10)
    (out / "big-1.0-py3-none-any.whl").unlink()
    with pytest.raises(SystemExit, match="SHA-256"):
        assemble(device)


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


def test_gpu_sh_stage_keeps_the_carried_part(tmp_path: Path) -> None:
    carry = ROOT / ".whl"
    if carry.exists():
        pytest.skip(".whl/ holds a real part in this checkout")
    carry.mkdir()
    try:
        (carry / "manifest.json").write_text(json.dumps({"parts": 1, "files": {}}))
        r = _gpu_sh("stage", env={"KIT_DIR": str(tmp_path / "kit")})
    finally:
        for f in carry.iterdir():
            f.unlink()
        carry.rmdir()
    assert r.returncode == 0 and "kept 1 file(s)" in r.stderr
    assert (tmp_path / "kit" / "manifest.json").is_file()
