"""The plot of `litehit curve`: format from the extension (PNG, SVG, PDF), the axes (GiB,
blocks on top, where the log axis starts, unknown bytes per block) and the title, read
from the matplotlib Figure that is saved (never from pixels)."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from test_curve import GIB, PNG_SIGNATURE, random_rows, run, worked_rows, write_facts

from litehit_core import FactRow, HitCurveSegment, InstanceCurve, InvalidRequestError
from litehit_service.litehit.curve import build_curves, run_curve, trace_name
from litehit_service.litehit.plot import (
    UNKNOWN_BYTES_LABEL,
    build_figure,
    curve_title,
    plot_format,
    plot_start,
)

S = HitCurveSegment


def rows_of(curves: list[tuple[tuple[int, int], ...]], block_bytes: int = 1024) -> list[FactRow]:
    """One request per hit curve (1-token blocks, 100 input tokens each)."""
    return [
        FactRow(str(i), "i", i + 1, 100, 1, block_bytes, tuple(S(*seg) for seg in curve))
        for i, curve in enumerate(curves)
    ]


def axes(fig: Figure) -> Axes:
    """The plot's one Axes, after a layout pass without rendering."""
    (ax,) = fig.axes
    fig.draw_without_rendering()  # a secondary axis takes its limits when drawn
    return ax


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("name", "head"),
    [("c.png", PNG_SIGNATURE), ("c.PNG", PNG_SIGNATURE), ("c.svg", b"<?xml"), ("c.pdf", b"%PDF")],
)
def test_the_extension_picks_the_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, head: bytes
) -> None:
    facts = write_facts(tmp_path / "litehit_facts.csv", worked_rows())
    code, _, err = run(capsys, str(facts), "-o", str(tmp_path / name))
    assert code == 0, err
    data = (tmp_path / name).read_bytes()
    assert data.startswith(head)
    if name.endswith(".svg"):
        assert b"<svg" in data
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["litehit_facts.csv", name])


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("c.jpg", "has extension '.jpg'"),
        ("c.png.tmp", "has extension '.tmp'"),
        ("curve", "has no extension"),
    ],
)
def test_another_extension_is_a_usage_error_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, problem: str
) -> None:
    missing = tmp_path / "missing.csv"  # never read: the extension is checked first
    out = str(tmp_path / name)
    code, stdout, err = run(capsys, str(missing), "-o", out, "--csv", str(tmp_path / "c.csv"))
    assert (code, stdout) == (2, "")
    assert err == (
        f"litehit curve: error: -o/--output {out!r} {problem}; the plot format follows it: "
        ".png, .svg or .pdf\n"
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidRequestError) as info:
        run_curve(str(missing), out)  # the API checks it before reading too
    assert str(info.value) == f"{out!r} {problem}; the plot format follows it: .png, .svg or .pdf"
    assert [plot_format(p) for p in ("a.png", "b.SVG", "c.Pdf")] == ["png", "svg", "pdf"]


def test_a_live_curve_with_a_bad_extension_fails_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "--server", "127.0.0.1:1", "--instance", "i", "-o", "c.gif")
    assert code == 2  # a usage error, not the unreachable server's exit code 1
    assert err == (
        "litehit curve: error: -o/--output 'c.gif' has extension '.gif'; the plot format "
        "follows it: .png, .svg or .pdf\n"
    )


# ---------------------------------------------------------------- title


def test_title_names_the_trace_and_the_instances(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "conversation_results"
    folder.mkdir()
    facts = write_facts(folder / "litehit_facts.csv", worked_rows())
    svg = tmp_path / "c.svg"
    assert run(capsys, str(facts), "-o", str(svg))[0] == 0
    # matplotlib's SVG keeps each text as a comment next to its glyphs
    title = "Exact LRU prefix-cache hit rate: trace conversation, instance gpu-0"
    assert f"<!-- {title} -->" in svg.read_text(encoding="utf-8")
    assert "litehit_facts.csv" not in svg.read_text(encoding="utf-8")


def test_a_trace_named_trace_is_not_called_trace_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``litehit replay`` of trace.jsonl writes trace_results/ (the README's walkthrough)."""
    folder = tmp_path / "trace_results"
    folder.mkdir()
    facts = write_facts(folder / "litehit_facts.csv", worked_rows())
    svg = tmp_path / "c.svg"
    assert run(capsys, str(facts), "-o", str(svg))[0] == 0
    text = svg.read_text(encoding="utf-8")
    assert "<!-- Exact LRU prefix-cache hit rate: trace, instance gpu-0 -->" in text
    assert "trace trace" not in text
    curves = build_curves(random_rows(1, n=200))[:1]
    assert curve_title(curves, "mooncake_trace") == (
        "Exact LRU prefix-cache hit rate: mooncake_trace, instance a"
    )
    assert curve_title(curves, "Trace") == "Exact LRU prefix-cache hit rate: Trace, instance a"


def test_trace_name_and_curve_title() -> None:
    assert trace_name("/x/trace_results/litehit_facts.csv") == "trace"
    assert trace_name("/x/out/litehit_facts.csv") == "out"
    assert trace_name("/x/mooncake_facts.csv") == "mooncake_facts"
    curves = build_curves(random_rows(1, n=200))
    assert curve_title(curves, "t") == "Exact LRU prefix-cache hit rate: trace t, instances a, b, c"
    assert curve_title(curves[:1]) == "Exact LRU prefix-cache hit rate: instance a"
    many = [InstanceCurve(f"i{k}", 4, 1024) for k in range(6)]
    assert curve_title(many, "t") == (
        "Exact LRU prefix-cache hit rate: trace t, instances i0, i1, i2, i3 and 2 more"
    )


# ---------------------------------------------------------------- axes


def test_gib_axis_with_blocks_on_top() -> None:
    (curve,) = build_curves(worked_rows())  # 1024-byte blocks, saturated at 4 blocks
    fig = build_figure([curve], title="T")
    ax = axes(fig)
    assert ax.get_title() == "T"
    assert (ax.get_xscale(), ax.get_xlabel()) == ("log", "LRU capacity (GiB, log scale)")
    assert ax.get_xlim() == (1024 / GIB, 32 * 1024 / GIB)  # first hit .. 8x the 99% mark
    (top,) = ax.child_axes
    assert top.get_xlabel() == "LRU capacity in blocks of 1 KiB"
    assert top.get_xlim() == pytest.approx((1, 32))
    assert [t.get_text() for t in ax.texts] == [f"{p}% of max: 4 KiB" for p in (90, 95, 99)]
    assert ax.get_ylabel() == "token hit rate" and ax.get_ylim() == (0, 32 / 54 * 1.12)
    assert build_figure([curve]).axes[0].get_title() == (
        "Exact LRU prefix-cache hit rate vs capacity"
    )


def test_linear_axis() -> None:
    (curve,) = build_curves(worked_rows())
    ax = axes(build_figure([curve], linear=True))
    assert (ax.get_xscale(), ax.get_xlabel()) == ("linear", "LRU capacity (GiB)")
    assert ax.get_xlim() == (0, 4 * 1024 / GIB * 1.1)
    assert ax.child_axes[0].get_xlim() == pytest.approx((0, 4.4))


def test_no_flat_decades_on_the_left() -> None:
    # 1 hit token from one block on, then nothing until the curve rises at 1000 blocks
    (curve,) = build_curves(rows_of([((1, 1),), ((1000, 10),)]))
    assert (curve.first_hit, curve.hit_tokens_at(999), curve.infinite_hit_tokens) == (1, 1, 11)
    assert plot_start(curve) == 500  # a factor of 2 below the rise, not 1 block
    ax = axes(build_figure([curve]))
    assert ax.get_xlim()[0] == 500 * 1024 / GIB
    assert ax.child_axes[0].get_xlim()[0] == pytest.approx(500)
    # a curve whose first hit is its rise starts at the first hit
    (late,) = build_curves(rows_of([((1000, 10),)]))
    assert plot_start(late) == late.first_hit == 1000
    # a curve rising at once starts at its first hit
    (steep,) = build_curves(rows_of([((1, 50),), ((3, 50),)]))
    assert plot_start(steep) == 1
    # marked points are never left of the axis: 95 % of the hits come at one block here
    (high,) = build_curves(rows_of([((1, 1),)] * 95 + [((1000, 5),)]))
    assert [m.capacity for m in high.marks()] == [1, 1, 1003]
    assert plot_start(high) == 1
    assert plot_start(InstanceCurve("none", 4, 1024)) == 1  # no hits at all


def test_several_instances_of_different_block_bytes_have_no_blocks_axis() -> None:
    curves = build_curves(random_rows(2, n=400))  # 1024, 3000 and 4096 bytes per block
    ax = axes(build_figure(curves))
    assert ax.child_axes == [] and ax.get_xlabel() == "LRU capacity (GiB, log scale)"
    assert ax.get_xlim()[0] == min(plot_start(c) * c.block_bytes / GIB for c in curves)
    # the same block bytes: one blocks axis for all
    same = build_curves([r._replace(block_bytes=2048) for r in random_rows(2, n=400)])
    (top,) = axes(build_figure(same)).child_axes
    assert top.get_xlabel() == "LRU capacity in blocks of 2 KiB"


def test_a_hybrid_curve_has_no_blocks_axis() -> None:
    hybrid = InstanceCurve("h", 4, 1024, model="hybrid")
    hybrid.add(((4096, 2), (9216, 3)), 20)
    ax = axes(build_figure([hybrid]))
    assert ax.child_axes == [] and ax.get_xlabel() == "LRU capacity (GiB, log scale)"
    with pytest.raises(InvalidRequestError) as info:
        build_figure([hybrid], block_bytes_unknown=True)
    assert str(info.value) == (
        "instance 'h' (model hybrid) counts capacity in bytes, so it cannot be drawn in "
        "blocks of unknown bytes"
    )


def test_unknown_block_bytes_draw_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (curve,) = build_curves(worked_rows())
    ax = axes(build_figure([curve], block_bytes_unknown=True))
    assert ax.get_xlabel() == f"{UNKNOWN_BYTES_LABEL}, log scale"
    assert UNKNOWN_BYTES_LABEL == "LRU capacity in blocks (bytes per block unknown)"
    assert ax.child_axes == [] and ax.get_xlim() == (1, 32)  # blocks, not GiB
    assert [t.get_text() for t in ax.texts] == [f"{p}% of max: 4 blocks" for p in (90, 95, 99)]
    linear = axes(build_figure([curve], linear=True, block_bytes_unknown=True))
    assert linear.get_xlabel() == UNKNOWN_BYTES_LABEL and linear.get_xlim() == (0, 4.4)
    # through the command
    facts = write_facts(tmp_path / "f.csv", worked_rows())
    svg = tmp_path / "c.svg"
    assert run(capsys, str(facts), "-o", str(svg), "--block-bytes-unknown")[0] == 0
    text = svg.read_text(encoding="utf-8")
    assert f"<!-- {UNKNOWN_BYTES_LABEL}, log scale -->" in text and "GiB" not in text
    code, _, err = run(capsys, str(facts), "--no-png", "--block-bytes-unknown")
    assert code == 2 and err == (
        "litehit curve: error: --block-bytes-unknown only affects the plot, which --no-png skips\n"
    )


def _crosses(p1, p2, q1, q2) -> bool:
    """Whether segments p1-p2 and q1-q2 cross (proper intersection)."""

    def side(a, b, c) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    return side(p1, p2, q1) * side(p1, p2, q2) < 0 and side(q1, q2, p1) * side(q1, q2, p2) < 0


@pytest.mark.parametrize("seed", range(6))
def test_the_marked_points_leader_lines_cross_nothing(seed: int) -> None:
    """Catches the 90 % and 95 % leader lines crossing each other or another mark's label
    (as they did: each label right of its own point, stacked the other way). Checked in
    display space on random traces' single-curve figures."""
    curve = build_curves(random_rows(seed))[0]
    fig = build_figure([curve])
    fig.canvas.draw()
    ax = axes(fig)
    shown = [t for t in ax.texts if "of max" in t.get_text()]
    assert len(shown) == 3
    leaders = [(ax.transData.transform(t.xy), ax.transData.transform(t.xyann)) for t in shown]
    boxes = [Text.get_window_extent(t) for t in shown]  # the text alone, not its leader
    for i, (a, b) in enumerate(leaders):
        for j, (c, d) in enumerate(leaders):
            if i < j:
                assert not _crosses(a, b, c, d), (i, j)
        for j, box in enumerate(boxes):
            if i == j:
                continue
            corners = [(box.x0, box.y0), (box.x1, box.y0), (box.x1, box.y1), (box.x0, box.y1)]
            for k in range(4):
                assert not _crosses(a, b, corners[k], corners[(k + 1) % 4]), (i, j)
