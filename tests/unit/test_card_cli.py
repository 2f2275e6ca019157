"""``cardstream card`` and ``cardstream eval card`` on files made by the synthetic generator."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from processors.card.training import synth
from processors.errors import ModelError

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "cases"


@pytest.fixture(scope="module")
def app():
    from processors.models import model_path

    try:
        model_path("u2netp")
    except ModelError as e:
        pytest.skip(f"u2netp model file not available ({e}); run `make models`")
    from streams.cli import app

    return app


def test_card_json_lines_with_decode_rejection(app, tmp_path):
    quad = np.array([[150.0, 140.0], [640.0, 170.0], [620.0, 480.0], [130.0, 460.0]])
    image, _ = synth.card_on_texture(np.random.default_rng(11), quad, (800, 600))
    img = tmp_path / "card.jpg"
    cv2.imwrite(str(img), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    txt = tmp_path / "notes.txt"
    txt.write_text("not an image")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["card", "--json", "--out", str(out), str(img), str(txt)])
    assert r.exit_code == 1, r.output  # one file was not accepted
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert [Path(x["file"]).name for x in rows] == ["card.jpg", "notes.txt"]
    assert set(rows[0]) == {"file", "status", "reasons", "quad", "confidence", "doc_type",
                            "rectified", "quality", "mrz"}
    assert rows[0]["quality"]["dpi"] > 0 and rows[0]["mrz"]["found"] is False  # no zone printed
    assert rows[1]["status"] == "rejected" and rows[1]["reasons"] == ["UNSUPPORTED_FORMAT"]
    assert rows[1]["quad"] is None and rows[1]["rectified"] is None
    assert rows[1]["quality"] is None and rows[1]["mrz"] is None
    assert rows[1]["doc_type"] == "unknown"  # as the results topic says it
    assert rows[1]["error"].startswith("unknown magic bytes (12 bytes)")
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    r = CliRunner().invoke(app, ["card", str(empty)])
    assert r.exit_code == 1 and "rejected UNSUPPORTED_FORMAT" in r.output
    assert "(empty input (0 bytes)" in r.output
    assert rows[0]["status"] == "accepted" and Path(rows[0]["rectified"]).is_file()
    from processors.card.metrics import quad_iou

    assert quad_iou(rows[0]["quad"], quad) >= 0.9
    alone = CliRunner().invoke(app, ["card", "--json", str(img), str(tmp_path / "missing.jpg")])
    missing = json.loads(alone.output.strip().splitlines()[-1])
    assert alone.exit_code == 1
    assert (missing["status"], missing["reasons"]) == ("rejected", ["OBJECT_NOT_FOUND"])
    # capture-quality annotations off (this small test card is LOW_RESOLUTION): no reasons
    ok = CliRunner().invoke(app, ["card", str(img)],
                            env={"CARDSTREAM_CARD__VERIFY__QUALITY": "false"})
    assert ok.exit_code == 0  # all accepted
    assert ok.output.startswith(f"{img}: accepted doc_type=id_card conf=")  # no reasons, one space
    noted = CliRunner().invoke(app, ["card", str(img)])
    assert noted.exit_code == 0  # annotations do not reject under the default profile
    assert noted.output.startswith(f"{img}: accepted LOW_RESOLUTION doc_type=id_card conf=")
    strict = CliRunner().invoke(app, ["card", "--profile", "strict", str(img)])
    assert strict.exit_code == 1  # the upload option profile: strict rejects it
    assert strict.output.startswith(f"{img}: rejected LOW_RESOLUTION doc_type=id_card conf=")
    assert " mrz=none" in strict.output


def test_card_shows_the_mrz_and_its_values_only_when_asked_and_allowed(app, tmp_path):
    from processors.card.training.documents import write_set

    write_set(tmp_path, 1, seed=9)  # a TD2 page that reads valid
    img = str(next(tmp_path.glob("*.jpg")))
    allowed = {"CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED": "true"}

    def mrz(*args, env=None):
        r = CliRunner().invoke(app, ["card", "--json", *args, img], env=env)
        return json.loads(r.stdout)["mrz"]

    shown = mrz("--mrz-values", env=allowed)
    assert shown["valid"] and shown["values"]["document_number"]
    assert "values" not in mrz("--mrz-values")  # asked, not allowed
    withheld = CliRunner().invoke(app, ["card", "--json", "--mrz-values", img])
    said = [json.loads(line) for line in withheld.stderr.splitlines() if line.startswith("{")]
    assert [(d["setting"], d["value"], d["allow"]) for d in said
            if d.get("event") == "mrz_values_withheld"] == [
        ("CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED", False,
         "CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED=true")]  # and why, on stderr
    denied = CliRunner().invoke(app, ["card", "--json", "--mrz-values", img],
                                env={"CARDSTREAM_CARD__VERIFY__MRZ_VALUES_ALLOWED": "false"})
    assert [json.loads(line)["value"] for line in denied.stderr.splitlines()
            if '"mrz_values_withheld"' in line] == [False]  # said off explicitly: the same
    assert not any(d.get("event") == "mrz_values_withheld" for d in (
        json.loads(line) for line in CliRunner().invoke(
            app, ["card", "--json", "--mrz-values", img], env=allowed).stderr.splitlines()
        if line.startswith("{")))
    assert "values" not in mrz(env=allowed)  # allowed, not asked
    text = CliRunner().invoke(app, ["card", "--mrz-values", img]).output
    assert f" mrz={shown['format']}:valid" in text and "values=" not in text  # withheld
    text = CliRunner().invoke(app, ["card", "--mrz-values", img], env=allowed).output
    assert f" mrz={shown['format']}:valid values={{document_code=" in text
    assert f", document_number={shown['values']['document_number']}," in text


def test_text_line_shows_the_mrz_values_a_row_carries():
    from streams.cli.card import VIEW

    mrz = {"found": True, "format": "TD3", "readable": True, "valid": True, "checks": None,
           "expired": False, "corrected": False,
           "values": {"document_code": "P", "issuing_state": "UTO",
                      "document_number": "L898902C3", "nationality": "UTO",
                      "birth_date": "740812", "sex": "F", "expiry_date": "120415",
                      "primary_name": "ERIKSSON", "secondary_name": "ANNA MARIA",
                      "optional_data": ""}}
    row = {"confidence": 0.97, "doc_type": "passport", "rectified": "out/p-jpg.rectified.jpg",
           "mrz": mrz}
    assert VIEW.text(row) == (
        " doc_type=passport conf=0.97 mrz=TD3:valid values={document_code=P, issuing_state=UTO,"
        " document_number=L898902C3, nationality=UTO, birth_date=740812, sex=F,"
        " expiry_date=120415, primary_name=ERIKSSON, secondary_name=ANNA MARIA}"
        " -> out/p-jpg.rectified.jpg")  # the blank optional_data left out
    assert VIEW.text({**row, "mrz": {**mrz, "values": None}}) == (
        " doc_type=passport conf=0.97 mrz=TD3:valid -> out/p-jpg.rectified.jpg")


def test_eval_card_prints_per_kind_summary(app, tmp_path):
    synth.write_set(tmp_path, 4, seed=5, negative_share=0.25)
    rows_file = tmp_path / "rows.jsonl"
    r = CliRunner().invoke(app, ["eval", "card", "--set", str(tmp_path), "--json",
                                 "--rows", str(rows_file)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    man = json.loads((tmp_path / "manifest.json").read_text())
    n_pos = sum("quad_approx" in c["expect"] for c in man["images"])
    assert summary["all"]["n"] == n_pos
    assert summary["negatives"]["n"] == len(man["images"]) - n_pos
    assert 0.0 <= summary["all"]["mean_iou"] <= 1.0
    # --rows: one line per scored case, in manifest order, adding up to the summary
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [x["file"] for x in rows] == [c["file"] for c in man["images"]]
    cards = [x for x in rows if x["kind"] != "negative"]
    assert len(cards) == n_pos and all(0.0 <= x["iou"] <= 1.0 for x in cards)
    assert np.mean([x["iou"] for x in cards]) == pytest.approx(summary["all"]["mean_iou"])
    assert sum("NO_CARD" in x["reasons"] for x in cards) == summary["all"]["no_card"]
    negs = [x for x in rows if x["kind"] == "negative"]
    assert len(negs) == summary["negatives"]["n"] and all(x["iou"] is None for x in negs)
    if negs:
        assert (np.mean(["NO_CARD" in x["reasons"] for x in negs])
                == summary["negatives"]["no_card_share"])


@pytest.mark.skipif(not (CASES / "manifest.json").is_file(),
                    reason="../shared/cases is absent (external check set); skipping")
def test_shared_negatives_are_no_card(app):
    man = json.loads((CASES / "manifest.json").read_text())
    negs = [CASES / c["file"] for c in man["images"] if c["expect"].get("reason") == "NO_CARD"]
    r = CliRunner().invoke(app, ["card", "--json", *map(str, negs)])
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert len(rows) == len(negs) > 0
    assert all("NO_CARD" in x["reasons"] for x in rows)


@pytest.mark.parametrize("command", ["card", "idphoto"])
def test_unusable_out_folder_is_a_usage_error_not_a_traceback(app, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    img = tmp_path / "any.jpg"
    cv2.imwrite(str(img), np.full((64, 64, 3), 128, np.uint8))
    r = CliRunner().invoke(app, [command, "--out", str(blocker / "sub"), str(img)])
    assert r.exit_code == 2
    assert "cannot create folder" in r.output and "Traceback" not in r.output
    assert not isinstance(r.exception, OSError)


@pytest.mark.parametrize("manifest", [None, "{}", "not json"])
def test_eval_card_without_a_manifest_is_a_usage_error(app, tmp_path, manifest):
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    r = CliRunner().invoke(app, ["eval", "card", "--set", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a manifest" in r.output
    assert isinstance(r.exception, SystemExit)  # a usage error, not a KeyError or OSError


def test_inputs_with_the_same_name_do_not_overwrite_each_other(app, tmp_path):
    quad = np.array([[150.0, 140.0], [640.0, 170.0], [620.0, 480.0], [130.0, 460.0]])
    files = []
    for k, seed in enumerate((11, 12)):
        d = tmp_path / f"in{k}"
        d.mkdir()
        image, _ = synth.card_on_texture(np.random.default_rng(seed), quad, (800, 600))
        cv2.imwrite(str(d / "card.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
        files.append(d / "card.jpg")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["card", "--json", "--out", str(out), *map(str, files)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    paths = [Path(x["rectified"]) for x in rows]
    assert [p.name for p in paths] == ["card-jpg.rectified.jpg", "card-jpg-2.rectified.jpg"]
    assert len({p.read_bytes() for p in paths}) == 2  # two different cards, both kept
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)


@pytest.mark.parametrize(("name", "written"), [
    (".jpg", "jpg.rectified.jpg"), (".hidden.png", "hidden-png.rectified.jpg"),
    ("...", "image.rectified.jpg"), ("me.jpg", "me-jpg.rectified.jpg")])
def test_an_input_named_with_a_leading_dot_writes_no_hidden_output(tmp_path, name, written):
    """A trial's ``.jpg`` wrote ``.jpg.rectified.jpg``, which ``ls`` does not show."""
    from streams.cli.files import output_path

    taken: set[Path] = set()
    assert output_path(tmp_path, tmp_path / "in" / name, "rectified.jpg", taken).name == written
    assert output_path(tmp_path, Path(name), "rectified.jpg", taken).name == \
        written.replace(".rectified", "-2.rectified")


@pytest.mark.parametrize("command", [["card", "IMG"], ["eval", "card", "--set", "SET"]])
def test_a_model_file_that_is_not_onnx_is_a_usage_error(app, tmp_path, command):
    bad = tmp_path / "model.onnx"
    bad.write_text("this is not an ONNX graph")
    synth.write_set(tmp_path, 2, seed=5, negative_share=0.0)
    img = next(tmp_path.glob("*.jpg"))
    args = [str(img) if a == "IMG" else str(tmp_path) if a == "SET" else a for a in command]
    # wide enough that rich's error box does not wrap the long tmp path and the message
    r = CliRunner().invoke(app, [*args, "--model", str(bad)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "not an ONNX model" in r.output and "Traceback" not in r.output
    assert "Invalid value for --model" in r.output


def test_an_onnx_model_of_another_shape_is_a_usage_error(app, tmp_path):
    """A valid ONNX graph that takes another input (here the orientation classifier's
    ``(N,1,160,256)``) is refused at load with both shapes, not at the first image."""
    from processors.card.orient import MODEL_FILE
    from processors.models import model_path

    synth.write_set(tmp_path, 1, seed=5, negative_share=0.0)
    img = next(tmp_path.glob("*.jpg"))
    r = CliRunner().invoke(app, ["card", str(img), "--model", str(model_path(MODEL_FILE))],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "Invalid value for --model" in r.output and "Traceback" not in r.output
    assert "(N, 3, 320, 320)" in r.output and "160, 256" in r.output


def test_eval_card_counts_accepted_cards_and_refuses_broken_sets(app, tmp_path):
    synth.write_set(tmp_path, 4, seed=5, negative_share=0.25)
    r = CliRunner().invoke(app, ["eval", "card", "--set", str(tmp_path), "--json"])
    summary = json.loads(r.output.strip().splitlines()[-1])
    rows = [json.loads(line) for line in CliRunner().invoke(
        app, ["card", "--json", *map(str, sorted(tmp_path.glob("*.jpg")))]).output.splitlines()
        if line.startswith("{")]
    man = {c["file"]: c for c in json.loads((tmp_path / "manifest.json").read_text())["images"]}
    cards = [x for x in rows if "quad_approx" in man[Path(x["file"]).name]["expect"]]
    assert summary["all"]["accepted_share"] == pytest.approx(
        sum(x["status"] == "accepted" for x in cards) / len(cards))
    # a listed file that is gone, a quad of 2 points, or nothing to score: usage errors
    broken = {"missing": {"images": [{"file": "gone.jpg", "expect": {"reason": "NO_CARD"}}]},
              "two points": {"images": [{"file": "x.jpg",
                                         "expect": {"quad_approx": [[0, 0], [1, 1]]}}]},
              "empty": {"images": []}}
    for name, manifest in broken.items():
        d = tmp_path / name.replace(" ", "_")
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps(manifest))
        r = CliRunner().invoke(app, ["eval", "card", "--set", str(d)])
        assert r.exit_code == 2, (name, r.output)
        assert isinstance(r.exception, SystemExit), name


@pytest.mark.parametrize("command", ["card", "idphoto"])
@pytest.mark.parametrize("bad, says", [(["--device", "gpu"], "'cpu', 'cuda' or 'auto'"),
                                       (["--batch", "0"], "at least 1")])
def test_bad_device_or_batch_is_a_usage_error_naming_the_choices(app, tmp_path, command, bad, says):
    img = tmp_path / "any.jpg"
    cv2.imwrite(str(img), np.full((64, 64, 3), 128, np.uint8))
    r = CliRunner().invoke(app, [command, *bad, str(img)])
    assert r.exit_code == 2, r.output
    assert says in r.output and "pydantic.dev" not in r.output
    assert f"Invalid value for {bad[0]}" in r.output  # the option is named


@pytest.mark.parametrize("command", ["card", "idphoto"])
def test_cuda_without_cuda_is_a_usage_error_and_leaves_no_folder(app, tmp_path, monkeypatch,
                                                                 command):
    import tempfile

    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here: --device cuda is not an error")
    img = tmp_path / "any.jpg"
    cv2.imwrite(str(img), np.full((64, 64, 3), 128, np.uint8))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where idphoto's default --out goes
    r = CliRunner().invoke(app, [command, "--device", "cuda", str(img)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "device=cuda requested" in r.output and "Traceback" not in r.output
    assert list(tmp.iterdir()) == []  # no empty output folder from a run that never started


@pytest.mark.parametrize("command", ["card", "idphoto"])
def test_a_fifo_or_folder_is_refused_without_being_read(app, tmp_path, command):
    import os

    fifo, folder = tmp_path / "pipe.jpg", tmp_path / "dir.jpg"
    os.mkfifo(fifo)  # reading it would block for ever: no writer
    folder.mkdir()
    r = CliRunner().invoke(app, [command, "--json", str(fifo), str(folder)])
    assert r.exit_code == 1, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert [(x["reasons"], x["error"]) for x in rows] == [(["OBJECT_NOT_FOUND"],
                                                          "not a regular file")] * 2
    text = CliRunner().invoke(app, ["card", str(folder)])
    assert text.output == f"{folder}: rejected OBJECT_NOT_FOUND doc_type=unknown conf=- " \
                          "(not a regular file)\n"


@pytest.mark.parametrize("command", ["card", "idphoto"])
def test_a_missing_file_says_so_and_the_next_file_is_still_read(app, tmp_path, command):
    missing, bad = tmp_path / "gone.jpg", tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    r = CliRunner().invoke(app,
                           [command, "--json", "--out", str(tmp_path / "out"), str(missing),
                            str(bad)])
    assert r.exit_code == 1, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert [(x["file"], x["reasons"]) for x in rows] == [(str(missing), ["OBJECT_NOT_FOUND"]),
                                                         (str(bad), ["UNSUPPORTED_FORMAT"])]
    assert rows[0]["error"] == "FileNotFoundError: No such file or directory"


@pytest.mark.parametrize("command", ["card", "idphoto"])
def test_pixel_data_that_fails_to_decode_says_why(app, tmp_path, command):
    """A truncated JPEG passes the header probe and fails in the processor's decode: its row
    carries the decoder's message like a file refused by the probe (it had none before)."""
    quad = np.array([[150.0, 140.0], [640.0, 170.0], [620.0, 480.0], [130.0, 460.0]])
    image, _ = synth.card_on_texture(np.random.default_rng(12), quad, (800, 600))
    data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    r = CliRunner().invoke(app, [command, "--json", str(cut)])
    assert r.exit_code == 1, r.output
    row = json.loads(r.output.strip().splitlines()[-1])
    assert (row["status"], row["reasons"]) == ("rejected", ["CORRUPT_IMAGE"])
    assert row["error"] == "jpeg data undecodable: Premature end of JPEG file"
    text = CliRunner().invoke(app, [command, str(cut)])
    assert text.output.rstrip().endswith("(jpeg data undecodable: Premature end of JPEG file)")


def test_rows_are_printed_batch_by_batch_and_output_names_stay_unique(tmp_path, capsys):
    """Each batch's rows are out (flushed) before the next batch is processed, so a run over
    hundreds of files shows its progress and holds one batch; a file refused by the probe ahead
    of any probed file is shown at once; ``-2`` still tells two inputs of one name apart when
    they fall in different batches. The sleep stand-in serves the card task: no model."""
    import typer

    from processors import registry
    from processors.decode import DecodeSettings
    from streams.cli.card import VIEW
    from streams.cli.files import print_rows, run_files

    def image(path: Path, grey: int) -> Path:
        path.parent.mkdir(exist_ok=True)
        cv2.imwrite(str(path), np.full((48, 64, 3), grey, np.uint8))
        return path

    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    files = [notes, image(tmp_path / "a" / "card.png", 40), tmp_path / "gone.png",
             image(tmp_path / "b" / "card.png", 80), image(tmp_path / "b" / "c.png", 120),
             image(tmp_path / "c" / "card.png", 160)]
    proc = registry.stand_in("card", call_ms=0.0, item_ms=0.0)
    process_batch = proc.process_batch
    shown: list[str] = []  # stdout lines, as they came
    calls: list[tuple[list[str], list[str]]] = []  # (items' upload ids, files shown before)

    def recording(items):
        shown.extend(capsys.readouterr().out.splitlines())
        calls.append(([it.upload_id for it in items], [s.split(": ")[0] for s in shown]))
        return process_batch(items)

    proc.process_batch = recording
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(typer.Exit) as e:
        print_rows(VIEW, run_files(registry.spec("card"), VIEW, proc, files, {},
                                   DecodeSettings(), 2, out), as_json=False)
    assert e.value.exit_code == 1  # notes.txt and gone.png are rejected
    shown.extend(capsys.readouterr().out.splitlines())
    assert calls == [(["cli-1", "cli-3"], [str(notes)]),
                     (["cli-4", "cli-5"], [str(f) for f in files[:4]])]
    assert [s.split(": ")[0] for s in shown] == [str(f) for f in files]
    assert shown[2] == f"{files[2]}: rejected OBJECT_NOT_FOUND doc_type=unknown conf=- " \
                       "(FileNotFoundError: No such file or directory)"
    assert shown[5] == (f"{files[5]}: accepted doc_type=id_card conf=1.0 -> "
                        f"{out / 'card-png-3.rectified.png'}")
    assert sorted(p.name for p in out.iterdir()) == [
        "c-png.rectified.png", "card-png-2.rectified.png", "card-png-3.rectified.png",
        "card-png.rectified.png"]
