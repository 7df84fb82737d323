"""``litehit tradeoff --hit-rate-type local|remote|all`` (the reference's flag): local and
remote curves from the same replays, checked point by point against ``litehit optimize``
at the same capacity (its CSVs' AccLocalHitTokens / AccRemoteHitTokens, a separate path),
the files per type, marks on total only, and --skip-run."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from litehit_service.cli import main
from tests.test_tradeoff import GIB, write_case

PNG = b"\x89PNG\r\n\x1a\n"


def masked_records(seed: int, n: int) -> list[dict]:
    """Requests of instances a and b over shared prefixes, a third of them with a
    block_mask (some leading blocks local), so local and remote hits both occur."""
    rng = random.Random(seed)
    ids: dict[tuple[int, ...], int] = {}
    out = []
    for t in range(1, n + 1):
        tokens = [-rng.randrange(4)] + [rng.randrange(12) for _ in range(rng.randint(0, 5))]
        keys = [ids.setdefault(tuple(tokens[: j + 1]), len(ids) + 1) for j in range(len(tokens))]
        rec = {"type": "request", "instance_id": rng.choice("ab"), "timestamp_ns": t * 10,
               "keys": keys, "input_len": 16 * len(keys) + 5}  # fmt: skip
        if rng.random() < 0.35:
            rec["block_mask"] = [rng.random() < 0.6 for _ in keys]
        out.append(rec)
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def _optimize_hits(tmp: Path, config: Path, capacity: int) -> tuple[int, int, int]:
    """(local, remote, input tokens) summed over the instances' last CSV rows, from
    ``litehit optimize`` with the group's quota set to ``capacity`` bytes."""
    data = json.loads(config.read_text())
    data["instance_groups"][0]["quota_capacity"] = capacity / GIB
    data["instance_groups"][0]["used_percentage"] = 1.0
    copy = tmp / f"at_{capacity}.json"
    copy.write_text(json.dumps(data))
    out = tmp / f"opt_{capacity}"
    assert main(["optimize", str(copy), "-o", str(out)]) == 0
    local = remote = tokens = 0
    for name in ("a", "b"):
        last = _rows(out / f"{name}_hit_rates.csv")[-1]
        local += int(last["AccLocalHitTokens"])
        remote += int(last["AccRemoteHitTokens"])
        tokens += int(last["AccInputTokens"])
    return local, remote, tokens


def test_all_writes_three_curves_that_optimize_confirms(tmp_path, capsys):
    """Catches: local and remote swapped or taken from the wrong instance, a curve of
    one type written under another's name, marks computed on a local curve, local +
    remote differing from total."""
    config = write_case(tmp_path, masked_records(3, 300), [("g", 0.01, ["a", "b"])],
                        policy="lru")  # fmt: skip
    out = tmp_path / "out"
    code = main(["tradeoff", str(config), "--hit-rate-type", "all", "--num-points", "6",
                 "--max-workers", "1", "-o", str(out)])  # fmt: skip
    assert code == 0
    pareto = out / "pareto"
    for kind in ("total", "local", "remote"):
        assert (pareto / f"pareto_curve_{kind}.png").read_bytes()[:8] == PNG
    curves = {k: _rows(pareto / f"pareto_curve_{k}.csv") for k in ("total", "local", "remote")}
    assert {r["kind"] for r in curves["total"]} >= {"theoretical", "point"}
    for kind in ("local", "remote"):
        assert not any(r["kind"].startswith("p9") for r in curves[kind])  # marks: total's
        assert [r["capacity_bytes"] for r in curves[kind]] == [
            r["capacity_bytes"] for r in curves["total"] if not r["kind"].startswith("p9")
        ]
    local_seen = remote_seen = 0
    for t, lo, re in zip(
        (r for r in curves["total"] if not r["kind"].startswith("p9")),
        curves["local"], curves["remote"], strict=True,
    ):  # fmt: skip
        assert int(lo["hit_tokens"]) + int(re["hit_tokens"]) == int(t["hit_tokens"])
        if t["kind"] in ("point", "refine"):
            capacity = int(t["capacity_bytes"])
            want = _optimize_hits(tmp_path, config, capacity)
            assert (int(lo["hit_tokens"]), int(re["hit_tokens"]), int(lo["input_tokens"])) == want
            local_seen += want[0]
            remote_seen += want[1]
    assert local_seen > 0 and remote_seen > 0  # the trace exercises both
    capsys.readouterr()
    # --skip-run re-draws every asked type from its CSV; a type never written is named
    for p in pareto.glob("*.png"):
        p.unlink()
    assert main(["tradeoff", str(config), "--skip-run", "--hit-rate-type", "remote",
                 "-o", str(out)]) == 0  # fmt: skip
    assert sorted(p.name for p in pareto.glob("*.png")) == [
        "pareto_curve_remote.png", "pareto_curve_total.png"
    ]  # fmt: skip
    (pareto / "pareto_curve_local.csv").unlink()
    assert main(["tradeoff", str(config), "--skip-run", "--hit-rate-type", "local",
                 "-o", str(out)]) == 2  # fmt: skip
    assert "pareto_curve_local.csv" in capsys.readouterr().err


def test_total_alone_writes_no_other_curve(tmp_path):
    """Catches local/remote files written when not asked (the default is total only)."""
    config = write_case(tmp_path, masked_records(4, 60), [("g", 0.01, ["a", "b"])],
                        policy="lru")  # fmt: skip
    assert main(["tradeoff", str(config), "--num-points", "3", "--max-workers", "1",
                 "-o", str(tmp_path / "o")]) == 0  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "o" / "pareto").glob("pareto_curve_*"))
    assert names == ["pareto_curve_total.csv", "pareto_curve_total.png"]


@pytest.mark.parametrize("bad", ["both", "LOCAL", ""])
def test_an_unknown_type_exits_2_naming_it(tmp_path, capsys, bad):
    config = write_case(tmp_path, masked_records(5, 5), [("g", -1, ["a", "b"])])
    with pytest.raises(SystemExit) as caught:
        main(["tradeoff", str(config), "--hit-rate-type", bad])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"got {bad!r}" in err and "total, local, remote, all" in err


def test_the_references_other_tradeoff_flags_run(tmp_path, capsys):
    """tradeoff.py's axis limits are applied; --warmup-capacity, --save-csv and
    --plot-timeseries run and the ones not acted on are said. Catches a reference command
    line that exits 2, and a flag silently ignored."""
    config = write_case(tmp_path, masked_records(6, 40), [("g", 0.01, ["a", "b"])],
                        policy="lru")  # fmt: skip
    code = main(["tradeoff", str(config), "--num-points", "3", "--max-workers", "1", "-o",
                 str(tmp_path / "o"), "--x-max", "0.5", "--y-min", "10", "--save-csv",
                 "--warmup-capacity", "10000", "--plot-timeseries"])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert (
        "--warmup-capacity, --plot-timeseries and --plot-capacity are accepted and not "
        "acted on" in err
    )
    from litehit_service.optimizer.tradeoff.plot import PlotCurve, curve_figure

    curve = PlotCurve("lru", 0.5, points=[(1 << 29, 0.4)], kept=[True])
    fig = curve_figure([curve], "t", "total", (None, 0.5, 10.0, None))
    ax = fig.axes[0]
    assert ax.get_xlim()[1] == 0.5 and ax.get_ylim()[0] == 10.0
