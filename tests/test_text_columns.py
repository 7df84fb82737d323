"""Numbers to CSV text by one compiled call (:mod:`litehit_service.offline.text_columns`)
against Python's own formatting, the oracle: integers over all of int64, rates as
``f"{v:.6f}"`` (ties, near-ties, 0 and 1), labels, empty fields; and the lifecycle CSV
written in pieces equal to the row-by-row formatting it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from litehit_service.offline.text_columns import (
    EMPTY,
    LABEL,
    OPTIONAL,
    fixed_units,
    table_text,
)


def test_integers_and_rates_are_pythons_text() -> None:
    """Catches a digit loop that mishandles 0, negatives or int64's ends, and a rate
    rounded by the product instead of Python's exact rule (the near-half values)."""
    rng = np.random.default_rng(7)
    num, den = rng.integers(0, 10**7, 4000), rng.integers(1, 10**7, 4000)
    ties = (np.arange(1000) + 0.5) / 1e6  # x.5 millionths: exactly between two outputs
    rates = np.concatenate([num / den, ties, [0.0, 1.0, 0.9999995, 5e-7]])
    ints = rng.integers(-(2**63), 2**63 - 1, len(rates), dtype=np.int64, endpoint=True)
    ints[:5] = [-(2**63), 2**63 - 1, 0, -1, 10]
    text = table_text([ints, rates], [0, 6])
    pairs = zip(ints.tolist(), rates.tolist(), strict=True)
    assert text == "".join(f"{a},{b:.6f}\n" for a, b in pairs)


def test_labels_and_empty_fields() -> None:
    """Catches a label index off by one, an empty field that still prints its sentinel,
    and the sentinel blanking a column that is not optional (a key of -2**63)."""
    keys = np.array([-(2**63), 5, -7], dtype=np.int64)
    maybe = np.array([EMPTY, 0, 42], dtype=np.int64)
    flags = np.array([1, 0, 2], dtype=np.int64)
    text = table_text([keys, maybe, flags], [0, OPTIONAL, LABEL], ["false", "true", "hbm-é"])
    assert text == "-9223372036854775808,,true\n5,0,false\n-7,42,hbm-é\n"
    assert table_text([np.zeros(0, dtype=np.int64)], [0]) == ""


def test_fixed_units_refuse_what_they_cannot_round() -> None:
    with pytest.raises(ValueError, match=r"finite and in \[0, 1e6\)"):
        fixed_units(np.array([0.5, -0.1]), 6)
    with pytest.raises(ValueError, match="digits must be in 1..9"):
        fixed_units(np.array([0.5]), 0)


def _naive_lifecycle(lives) -> str:
    """The row-by-row formatting the compiled one replaced (the oracle)."""
    alive = lives.alive
    header = "BlockKey,BirthTimeUs,DeathTimeUs,LifespanUs,AccessCount,LastAccessTimeUs,IsAlive"
    rows = []
    for i in range(len(lives.birth)):
        fields = [
            str(int(lives.key[i])), str(int(lives.birth[i]) // 1000),
            "" if alive[i] else str(int(lives.death[i]) // 1000),
            str(int(lives.lifespan_us[i])), str(int(lives.hits[i])),
            "" if lives.last_hit[i] < 0 else str(int(lives.last_hit[i]) // 1000),
            "true" if alive[i] else "false",
        ]  # fmt: skip
        if lives.info.tier_names:
            fields.append(lives.info.tier_names[int(lives.tier[i])])
        rows.append(",".join(fields) + "\n")
    return header + (",Tier" if lives.info.tier_names else "") + "\n" + "".join(rows)


@pytest.mark.parametrize("tiers", [(), ("hbm", "dram")])
def test_the_lifecycle_csv_in_pieces_is_the_row_by_row_text(monkeypatch, tiers) -> None:
    """Catches a piece boundary that drops or repeats a life, an alive life with a death
    time, a never-hit life with a last access, a tier named by the wrong index."""
    from litehit_service.optimizer.analysis import lifecycle
    from litehit_service.optimizer.analysis.replay import InstanceInfo

    monkeypatch.setattr(lifecycle, "CSV_CHUNK_LIVES", 7)
    rng = np.random.default_rng(3)
    n = 60
    birth = rng.integers(0, 10**9, n)
    death = np.where(rng.random(n) < 0.3, -1, birth + rng.integers(0, 10**7, n))
    last = np.where(rng.random(n) < 0.4, -1, birth + 5000)
    lives = lifecycle.InstanceLives(
        info=InstanceInfo("a", 0, "g", "lru", tiers),
        key=rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64), slot=np.arange(n),
        tier=rng.integers(0, max(len(tiers), 1), n), birth=birth, death=death,
        hits=rng.integers(0, 5, n), last_hit=last, cause=np.zeros(n, dtype=np.int64),
        end_ns=2 * 10**9,
    )  # fmt: skip
    assert "".join(lifecycle.lifecycle_csv(lives)) == _naive_lifecycle(lives)
