"""The searcher's caches: bounded by the weight they hold, least recently used out first."""

from __future__ import annotations

from mugraph.stages.search.lru import WeightedLRU


def test_the_least_recently_used_go_first_until_the_weight_fits() -> None:
    c: WeightedLRU[str, list[int]] = WeightedLRU(10, len)
    c.put("a", [1] * 4)
    c.put("b", [1] * 4)
    assert c.get("a") is not None  # now "b" is the least recently used
    c.put("c", [1] * 4)
    assert c.get("b") is None and c.get("a") is not None and c.get("c") is not None
    assert c.weight == 8 and len(c) == 2


def test_an_entry_heavier_than_the_limit_is_not_kept_and_a_replaced_one_is_reweighed() -> None:
    c: WeightedLRU[str, list[int]] = WeightedLRU(10, len)
    c.put("a", [1] * 3)
    c.put("huge", [1] * 11)
    assert c.get("huge") is None and c.get("a") is not None
    c.put("a", [1] * 9)
    assert c.weight == 9 and c.values() == [[1] * 9]
    c.put("e", [])  # weighs at least 1
    assert c.weight == 10 and len(c) == 2


def test_a_smaller_limit_drops_the_least_recently_used_at_once() -> None:
    c: WeightedLRU[str, list[int]] = WeightedLRU(10, len)
    for key in "abc":
        c.put(key, [1] * 3)
    assert c.get("a") is not None  # "b" is now the least recently used, then "c"
    c.resize(4)
    assert c.limit == 4 and c.weight == 3 and c.values() == [[1] * 3]
    assert c.get("a") is not None and c.get("b") is None and c.get("c") is None
