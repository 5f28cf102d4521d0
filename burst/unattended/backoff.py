"""Waits that grow after each failure, and a failure told in one line.

The controller and the cluster watcher must outlive any error a target raises (a Pulumi
``CommandError``, a tunnel that broke, a head that does not answer): they log it, wait, and try
again. One helper so that both wait the same way and neither hammers a cloud API or a login node.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """The wait before the next try: ``waits[0]`` after the first failure, then the next, then the
    last for ever. ``reset()`` after a success starts again from the first."""

    waits: tuple[float, ...]
    failures: int = 0

    def next_wait(self) -> float:
        wait = self.waits[min(self.failures, len(self.waits) - 1)]
        self.failures += 1
        return wait

    @property
    def exhausted(self) -> bool:
        """Every wait has been used once (for a bounded retry)."""
        return self.failures >= len(self.waits)

    def reset(self) -> None:
        self.failures = 0


def reason_of(exc: BaseException) -> str:
    """The last line of an error's text (Pulumi and kubectl end with the cause), or its class."""
    text = str(exc).strip()
    return text.splitlines()[-1][:300] if text else exc.__class__.__name__
