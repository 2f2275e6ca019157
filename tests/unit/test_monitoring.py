"""Monitoring files: the Prometheus rules (deploy/prometheus/rules.yml) checked and unit-tested
by a pinned promtool, and the Grafana dashboard (deploy/grafana/cardstream.json); every metric
their queries name is one the worker exports, read from ``streams.metrics.WorkerMetrics``'
registry (or a recording rule of rules.yml).

promtool is built from the Go module proxy by ``scripts/promtool`` (``make tools``, which ``make
test`` runs first; cached under ~/.cache, like helm and MinIO); the fixture only finds it, and
fails saying how to build it when it is not there (nothing is skipped).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules.yml"
RULE_TESTS = PROM / "rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "cardstream.json"

# PromQL words that are not metric names: binary-operator keywords, modifiers, literals
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "offset", "bool", "atan2", "inf", "nan"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a small lexer, enough for our files).

    Removed before looking for names: Grafana variables (``$job``, ``${x}``), string literals,
    label matchers ``{...}``, range and subquery brackets ``[...]``, the label lists of
    ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``; what is left, an
    identifier followed by ``(`` is a function or an aggregation, a keyword is a keyword, and
    any other identifier is a metric name.
    """
    s = re.sub(r"\$\{[^}]*\}|\$\w+", "0", expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', s)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in _IDENT.finditer(s):
        word = m.group(0)
        before = s[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":  # 1e3, 0.5, 10m...
            continue
        if re.match(r"\s*\(", s[m.end():]) or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def exported_names() -> set[str]:
    """Sample names the worker's registry exposes on /metrics (counters as ``_total``,
    histograms as ``_bucket``/``_sum``/``_count``), whether or not a child exists yet."""
    out = set()
    for fam in WorkerMetrics().registry.collect():
        if fam.type == "counter":
            out.add(fam.name + "_total")
        elif fam.type == "histogram":
            out.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            out.add(fam.name)
    return out


def rules_doc() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text())


def recorded_names() -> set[str]:
    return {r["record"] for g in rules_doc()["groups"] for r in g["rules"] if "record" in r}


def rule_exprs() -> list[tuple[str, str]]:
    return [(r.get("record") or r["alert"], r["expr"])
            for g in rules_doc()["groups"] for r in g["rules"]]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


# ------------------------------------------------------------------------------------ promtool

@pytest.fixture(scope="module")
def promtool() -> str:
    """Path of the pinned promtool, built by ``make tools`` (``scripts/promtool --cached`` finds
    it; a build inside a test would take minutes)."""
    if os.environ.get("CARDSTREAM_PROMTOOL"):
        return os.environ["CARDSTREAM_PROMTOOL"]
    r = subprocess.run([str(ROOT / "scripts" / "promtool"), "--cached"], check=False,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.fail(r.stderr[-2000:])
    return r.stdout.strip().splitlines()[-1]


def run_promtool(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *map(str, args)], check=False, capture_output=True,
                          text=True, timeout=300)


def test_promtool_checks_the_rules(promtool: str) -> None:
    r = run_promtool(promtool, "check", "rules", "--lint=all", "--lint-fatal", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    n = sum(len(g["rules"]) for g in rules_doc()["groups"])
    assert f"SUCCESS: {n} rules found" in r.stdout


def test_promtool_rule_unit_tests_pass(promtool: str) -> None:
    r = run_promtool(promtool, "test", "rules", RULE_TESTS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    alerts = {r["alert"] for g in rules_doc()["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {"CardstreamLagGrowing", "CardstreamPartitionStalled",
                      "CardstreamDeadLetterRate", "CardstreamBreakerOpen",
                      "CardstreamP99OverTarget"}
    fired = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert fired == alerts


def test_a_broken_rule_fails_the_check(promtool: str, tmp_path: Path) -> None:
    doc = rules_doc()
    doc["groups"][1]["rules"][0]["expr"] = "sum by (job) (cardstream_consumer_lag > "
    bad = tmp_path / "rules.yml"
    bad.write_text(yaml.safe_dump(doc))
    r = run_promtool(promtool, "check", "rules", bad)
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr


def test_a_wrong_expectation_fails_the_unit_tests(promtool: str, tmp_path: Path) -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    # the breaker case: expect the alert to have cleared while it still fires
    case = next(c for c in tests["tests"]
                if any(t["alertname"] == "CardstreamBreakerOpen" for t in c["alert_rule_test"]))
    case["alert_rule_test"][1]["exp_alerts"] = []
    tests["rule_files"] = [str(RULES)]
    bad = tmp_path / "rules.test.yml"
    bad.write_text(yaml.safe_dump(tests))
    r = run_promtool(promtool, "test", "rules", bad)
    assert r.returncode != 0 and "CardstreamBreakerOpen" in r.stdout + r.stderr


def test_compose_runs_the_prometheus_promtool_is_built_as() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    pin = re.search(r'PROMETHEUS_VERSION="\$\{PROMETHEUS_VERSION:-([0-9.]+)\}"',
                    (ROOT / "scripts" / "promtool").read_text())
    assert pin is not None
    assert compose["services"]["prometheus"]["image"] == f"prom/prometheus:v{pin.group(1)}"


def test_compose_prometheus_loads_the_rules() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    prom = yaml.safe_load((PROM / "prometheus.yml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    (rule_file,) = prom["rule_files"]
    assert f"./deploy/prometheus/rules.yml:{rule_file}:ro" in mounts


# ------------------------------------------------------------------------------- metric names

@pytest.mark.parametrize("expr, names", [
    ('sum by (job, le) (rate(cardstream_a_bucket{job=~"$job",le="+Inf"}[$__rate_interval]))',
     {"cardstream_a_bucket"}),
    ("cardstream:x:sum > 500 and deriv(cardstream:x:sum[10m]) > 0", {"cardstream:x:sum"}),
    ("a / on (task) group_left (model) b offset 5m > bool 1e3", {"a", "b"}),
    ("histogram_quantile(0.99, sum by (le) (rate(up[5m:30s])))", {"up"}),
    ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
])
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_rules_name_only_exported_metrics() -> None:
    exported, recorded = exported_names(), recorded_names()
    assert "cardstream_consumer_lag" in exported and "cardstream_results_total" in exported
    for name, expr in rule_exprs():
        used = metric_names(expr)
        assert used, f"{name}: no metric found in {expr!r}"
        unknown = used - exported - recorded
        assert not unknown, f"rule {name} names {sorted(unknown)}, which the worker does not export"


def test_rule_tests_feed_only_exported_series() -> None:
    exported = exported_names()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for s in case["input_series"]:
            name = s["series"].split("{", 1)[0]
            assert name in exported, (f"rules.test.yml feeds {name}, which the worker does not "
                                      "export")


def test_dashboard_names_only_exported_metrics() -> None:
    exported = exported_names()
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    for title, expr in exprs:
        used = metric_names(expr)
        assert used, f"panel {title!r}: no metric in {expr!r}"
        unknown = used - exported
        assert not unknown, f"panel {title!r} names {sorted(unknown)}, not exported by the worker"
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["definition"])
            assert m and m.group(1) in exported, var["definition"]


def test_an_unexported_metric_is_caught() -> None:
    assert metric_names("rate(cardstream_results_totl[5m])") - exported_names() == {
        "cardstream_results_totl"}


# ---------------------------------------------------------------------------------- dashboard

def test_dashboard_layout_and_datasource() -> None:
    d = dashboard()
    panels = d["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert d["uid"] == "cardstream-workers"
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert p["targets"] and p["description"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs))
    titles = {p["title"] for p in panels}
    for want in ("Throughput per task", "Batch sizes", "Stage times (P99)", "Lag per partition",
                 "Verdict mix", "Dead letters by code", "Breaker"):
        assert want in titles


def test_promtool_checks_the_config_compose_runs(promtool: str, tmp_path: Path) -> None:
    """deploy/prometheus/prometheus.yml as compose's Prometheus reads it: every rules file it
    names is one compose mounts, and the whole config (rules included) passes ``promtool check
    config`` (the container paths mapped back to the repository's files)."""
    svc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["prometheus"]
    mounts = {}
    for v in svc["volumes"]:
        host, container = v.split(":")[:2]
        mounts[container] = (ROOT / host).resolve()
    assert f"--config.file={next(c for c, h in mounts.items() if h == PROM / 'prometheus.yml')}" \
        in svc["command"]
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] and all(f in mounts for f in config["rule_files"]), \
        (config["rule_files"], sorted(mounts))
    config["rule_files"] = [str(mounts[f]) for f in config["rule_files"]]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    r = run_promtool(promtool, "check", "config", local)
    assert r.returncode == 0, r.stdout + r.stderr
    n = sum(len(g["rules"]) for g in rules_doc()["groups"])
    assert f"SUCCESS: {n} rules found" in r.stdout + r.stderr
