"""``cardstream eval mrz`` / ``eval quality`` on a tiny generated documents set."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from processors.card.training.documents import write_set
from streams.cli.app import app


def test_eval_mrz_and_quality_on_a_tiny_set(tmp_path):
    write_set(tmp_path, 2, seed=7)
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path), "--given-quads",
                                 "--json", "--rows", str(tmp_path / "rows.jsonl")])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)  # stdout holds the figures alone (log lines go to stderr)
    assert res["documents"] == 2
    assert 0.0 <= res["exact"] <= res["found"] <= 1.0
    assert set(res["fields"]) >= {"document_number", "birth_date", "checks", "format"}
    truth = json.loads((tmp_path / "manifest.json").read_text())["documents"]
    covers = ["+".join(k for k in ("glare", "hand") if d["truth"][f"{k}_on_mrz"]) or "clear"
              for d in truth]
    assert {k: v["n"] for k, v in res["by_cover"].items()} == {
        k: covers.count(k) for k in set(covers)}
    assert res["exact"] == pytest.approx(
        sum(v["n"] * v["exact"] for v in res["by_cover"].values()) / 2)
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 2
    q = CliRunner().invoke(app, ["eval", "quality", "--set", str(tmp_path), "--json"])
    assert q.exit_code == 0, q.output
    qr = json.loads(q.stdout)  # the pipeline's card_warm_up log line is on stderr
    assert qr["documents"] == 2 and qr["measured"] <= 2
    assert qr["quality_cpu_ms_per_document"] >= 0.0


def test_eval_mrz_refuses_a_folder_that_is_not_a_set(tmp_path):
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a documents set" in r.output
