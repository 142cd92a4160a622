"""Ids sort by creation, even for a burst made within one millisecond."""

from __future__ import annotations

from corral.ids import new_id


def test_ids_made_in_a_burst_sort_in_creation_order() -> None:
    made = [new_id("work") for _ in range(2000)]  # many share a millisecond
    assert sorted(made) == made
    assert len(set(made)) == len(made)


def test_an_id_is_prefix_then_26_characters() -> None:
    prefix, body = new_id("sesn").split("_")
    assert prefix == "sesn" and len(body) == 26
