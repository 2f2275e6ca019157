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
    # stdout holds the figures alone (log lines go to stderr), strict JSON: a figure the reader
    # alone does not measure is null, not NaN
    res = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert res["pipeline_cpu_ms_per_document"] is None and res["mrz_cpu_ms_per_document"] > 0
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
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [x["cover"] for x in rows] == covers
    hidden = [d["truth"]["mrz_chars_hidden"] for d in truth]
    assert [x["chars_hidden"] for x in rows] == hidden and all(h >= 0 for h in hidden)
    assert sum(v["n"] for v in res["by_print"].values()) == 2
    assert res["by_print"].get("visible", {"n": 0})["n"] == hidden.count(0)
    q = CliRunner().invoke(app, ["eval", "quality", "--set", str(tmp_path), "--json"])
    assert q.exit_code == 0, q.output
    # the pipeline's card_warm_up log line is on stderr; no grey copy among 2: recall is null
    qr = json.loads(q.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert qr["grey_copies"] > 0 or qr["photocopy_recall"] is None
    assert qr["documents"] == 2 and qr["measured"] <= 2
    assert qr["quality_cpu_ms_per_document"] >= 0.0


def test_eval_mrz_refuses_a_folder_that_is_not_a_set(tmp_path):
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a documents set" in r.output


@pytest.mark.parametrize("given", [[], ["--given-quads"]])
def test_eval_mrz_refuses_a_set_whose_files_are_missing_or_no_images(tmp_path, given):
    """A broken set is a usage error in both modes (exit 2, the file named), never a traceback
    nor a file silently scored as a miss."""
    write_set(tmp_path, 2, seed=7)
    files = sorted(tmp_path.glob("*.jpg"))
    files[0].write_bytes(b"not an image at all")
    def said(r) -> str:  # the error box's text, unwrapped
        return " ".join(r.output.replace("│", " ").split())

    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path), *given])
    assert r.exit_code == 2, r.output
    assert f"the manifest lists {files[0].name}, which cannot be read" in said(r)
    files[0].unlink()
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path), *given])
    assert r.exit_code == 2 and files[0].name in said(r), r.output


@pytest.mark.parametrize("args", [["--batch", "0"], ["--batch", "-1"],
                                  ["--rows", "/nonexistent/dir/rows.jsonl"], ["--rows", "."],
                                  ["--rows", "{set}/manifest.json"],
                                  ["--rows", "{set}/doc_7_0000.jpg"],
                                  ["--rows", "/proc/rows.jsonl"], ["--rows", "{tmp}/dangling"]])
def test_eval_mrz_refuses_bad_options_before_it_runs(tmp_path, args):
    """Refused before the run (exit 2, the option named): a --rows path found bad after it
    would lose the figures, and one in the set would overwrite the set."""
    s = tmp_path / "set"
    write_set(s, 1, seed=7)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "rows.jsonl")
    before = {p.name: p.read_bytes() for p in s.iterdir()}
    args = [a.format(set=s, tmp=tmp_path) for a in args]
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(s), "--given-quads", *args])
    assert r.exit_code == 2, r.output
    assert args[0] in r.output  # the option named, not --set
    assert "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in s.iterdir()} == before  # the set untouched


def _manifest(tmp_path, edit):
    write_set(tmp_path, 2, seed=7)
    m = json.loads((tmp_path / "manifest.json").read_text())
    edit(m)
    (tmp_path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("edit", [
    lambda m: m.update(documents=[]),
    lambda m: m.update(documents={"a": 1}),
    lambda m: m["documents"][0].pop("file"),
    lambda m: m["documents"][0].update(file=42),
    lambda m: m["documents"][0].update(file="/etc/passwd"),
    lambda m: m["documents"][0].update(file=""),
    lambda m: m["documents"][1].update(file=m["documents"][0]["file"]),
    lambda m: m["documents"][0].pop("truth"),
    lambda m: m["documents"][0].update(truth=None),
    lambda m: m["documents"][0]["truth"].update(quad=[[0, 0], [1, 1]]),
    lambda m: m["documents"][1]["truth"].update(format="TD9"),
    lambda m: m["documents"][0]["truth"].update(format=None),
    lambda m: m["documents"][1]["truth"].update(checks="yes"),
    lambda m: m["documents"][1]["truth"]["checks"].update(composite="no"),
    lambda m: m["documents"][0]["truth"].update(expired="no"),
    lambda m: m["documents"][0]["truth"].update(grey_copy="false"),
    lambda m: m["documents"][1]["truth"]["fields"].pop("birth_date"),
    lambda m: m["documents"][1]["truth"]["fields"].update(sex=1),
    lambda m: m["documents"][0]["truth"].update(dpi="high"),
    lambda m: m["documents"][0]["truth"].update(dpi=float("nan")),
    lambda m: m["documents"][0]["truth"].update(tilt_deg=True),
    lambda m: m["documents"][0]["truth"].update(doc_type="banana"),
    lambda m: m["documents"][0]["truth"].update(dpi=0),
    lambda m: m["documents"][0]["truth"].update(dpi=-3),
    lambda m: m["documents"][0]["truth"]["quad"][1].__setitem__(0, float("nan")),
    lambda m: m["documents"][0]["truth"]["quad"][2].__setitem__(1, "a"),
], ids=["none", "not-a-list", "no-file", "file-42", "outside", "empty-name", "listed-twice",
        "no-truth", "truth-null", "two-corners", "format-td9", "format-null", "checks-yes",
        "check-no", "expired-no", "grey-copy-string", "field-missing", "field-number",
        "dpi-string", "dpi-nan", "tilt-bool", "doc-type-banana", "dpi-zero", "dpi-negative",
        "quad-nan", "quad-string"])
@pytest.mark.parametrize("given", [["mrz"], ["mrz", "--given-quads"], ["quality"]])
def test_eval_mrz_refuses_a_malformed_manifest(tmp_path, edit, given):
    _manifest(tmp_path, edit)
    r = CliRunner().invoke(app, ["eval", given[0], "--set", str(tmp_path), *given[1:]])
    assert r.exit_code == 2, r.output
    assert "--set" in r.output and "Traceback" not in r.output


def test_eval_refuses_an_image_that_is_a_link_out_of_the_set(tmp_path):
    """A set's images are its own files: a link to a file elsewhere was followed and scored."""
    s = tmp_path / "set"
    write_set(s, 2, seed=7)
    name = json.loads((s / "manifest.json").read_text())["documents"][1]["file"]
    (tmp_path / "elsewhere.jpg").write_bytes((s / name).read_bytes())
    (s / name).unlink()
    (s / name).symlink_to(tmp_path / "elsewhere.jpg")
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(s), "--given-quads"])
    assert r.exit_code == 2, r.output
    assert "symbolic link" in " ".join(r.output.replace("│", " ").split())



@pytest.mark.parametrize("bad", [-3, "many", 1.5, True, "0"])
def test_eval_mrz_refuses_a_count_of_hidden_characters_that_is_none(tmp_path, bad):
    """``mrz_chars_hidden`` is a count or null: anything else is a usage error (exit 2), not a
    document silently counted as hidden (a fresh user's trial)."""
    write_set(tmp_path, 2, seed=7)
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["documents"][1]["truth"]["mrz_chars_hidden"] = bad
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path), "--given-quads"])
    assert r.exit_code == 2, r.output
    assert "mrz_chars_hidden" in " ".join(r.output.replace("│", " ").split())


def test_eval_mrz_shows_documents_whose_hidden_characters_were_not_counted(tmp_path):
    """A set where some truths count the hidden characters and others do not (null) shows the
    others as ``unmeasured`` and takes the visible share of the measured ones; a set where none
    does says so."""
    write_set(tmp_path, 2, seed=7)
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["documents"][0]["truth"]["mrz_chars_hidden"] = None
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    args = ["eval", "mrz", "--set", str(tmp_path), "--given-quads"]
    res = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert res["by_print"]["unmeasured"]["n"] == 1
    assert sum(v["n"] for k, v in res["by_print"].items() if k != "unmeasured") == 1
    assert "of the 1 measured" in CliRunner().invoke(app, args).stdout
    man["documents"][1]["truth"].pop("mrz_chars_hidden")
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    res = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert res["by_print"] == {}
    assert "not counted by this set's truth" in CliRunner().invoke(app, args).stdout


def test_characters_the_photo_lost_are_counted_without_changing_the_photo():
    """``mrz_chars_hidden``: a character whose ink is saturated, or whose cell lies under the
    thumb, is lost; one whose paper alone is saturated is not. Measuring draws nothing from the
    generator's stream: the same seed gives the same photo with or without it."""
    import cv2
    import numpy as np

    from processors.card.mrz.icao import Format, compose
    from processors.card.training.documents import (
        DocTruth,
        chars_hidden,
        photograph,
        render_document,
    )

    lit = np.full((40, 100, 3), 200.0, np.float32)
    for j in range(5):  # five characters, 20 px cells, a dark bar of ink in each
        lit[10:30, 20 * j + 8:20 * j + 12] = 30.0
    sat = np.zeros((40, 100), np.uint8)
    sat[:, 0:20] = 255  # cell 0: ink and paper saturated
    sat[:, 20:28] = 255  # cell 1: the paper beside its ink only
    sat[:, 32:40] = 255
    hand = np.zeros((40, 100), np.uint8)
    hand[:, 60:80] = 1  # cell 3 under the thumb
    assert chars_hidden(lit, sat, hand, np.eye(3), [([0, 0, 100, 40], "AB<CD")]) == 2
    assert chars_hidden(lit, sat * 0, None, np.eye(3), [([0, 0, 100, 40], "AB<CD")]) == 0

    lines = compose(Format.TD1, document_code="I", issuing_state="UTO",
                    document_number="D23145890", optional_data="", birth_date="740812",
                    sex="F", expiry_date="120415", nationality="UTO", primary_name="ERIKSSON",
                    secondary_name="ANNA MARIA", optional_data_2="")
    face, alpha, boxes, _ = render_document(np.random.default_rng(1), Format.TD1, lines)
    shots = []
    for measured in (False, True):
        t = DocTruth(format="TD1", lines=list(lines), fields={}, checks={}, all_valid=True,
                     expired=False, doc_type="id_card", doc_mm=(85.6, 53.98))
        spots = list(zip(boxes, lines, strict=True)) if measured else []
        img = photograph(np.random.default_rng(5), face, alpha, t, 245.0, (800, 600),
                         glare_share=1.0, lines=spots)
        shots.append((img, t.mrz_chars_hidden))
    assert shots[0][1] is None and isinstance(shots[1][1], int)
    assert cv2.norm(shots[0][0], shots[1][0], cv2.NORM_INF) == 0


@pytest.mark.parametrize(("edit", "said"), [
    (lambda m: m["documents"][1].update(file=m["documents"][0]["file"]), "lists {file} again"),
    (lambda m: m["documents"][0].update(file="../x.jpg"), "(a name, no path)"),
    (lambda m: m["documents"][0]["truth"].pop("dpi"), "dpi missing")])
def test_eval_says_which_part_of_the_manifest_is_wrong(tmp_path, edit, said):
    """A file listed twice and a path out of the folder had one message, and a missing truth key
    was not named (a fresh user's trial)."""
    _manifest(tmp_path, edit)
    first = json.loads((tmp_path / "manifest.json").read_text())["documents"][0]["file"]
    r = CliRunner().invoke(app, ["eval", "mrz", "--set", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert said.format(file=first) in " ".join(r.output.replace("│", " ").split())


@pytest.mark.parametrize("n", ["-1", "0", "x", "1.5"])
def test_the_set_generator_refuses_a_count_below_one(n, monkeypatch, tmp_path, capsys):
    """``python -m processors.card.training.documents --n -1`` wrote an empty manifest and
    exited 0 (a fresh user's trial): a count below 1 is a usage error, and nothing is written."""
    import sys

    from processors.card.training import documents

    monkeypatch.setattr(sys, "argv", ["documents", "--out", str(tmp_path / "set"), "--n", n])
    with pytest.raises(SystemExit) as ei:
        documents.main()
    assert ei.value.code == 2
    assert "at least 1" in capsys.readouterr().err
    assert not (tmp_path / "set").exists()
