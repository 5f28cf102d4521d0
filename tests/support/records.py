"""burst's records written as its commands write them (under the state lock), for tests that start
from a given state."""

from __future__ import annotations


def save(record) -> None:
    from burst.home import state

    with state.locked():
        state.save(record)
