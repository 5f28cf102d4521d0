"""Why a candidate is what it is, as codes the code decides on and text the user reads.

A ``Reason`` is the sentence ``burst plan`` prints, carrying a ``Code``; the planner, the CLI and
the pinning rules test codes (``BLOCKING``, ``BUDGET_OR_DEADLINE``), never the wording, so a
sentence can be reworded without changing a decision. Plain strings (an estimate's notes) are
``Code.NOTE``.
"""

from __future__ import annotations

from enum import Enum


class Code(str, Enum):
    DEADLINE_PASSED = "deadline_passed"
    MISSES_DEADLINE = "misses_deadline"
    OVER_BUDGET = "over_budget"
    EMISSIONS_UNKNOWN = "emissions_unknown"
    OVER_EMISSIONS = "over_emissions"
    TOO_SLOW = "too_slow"
    PREEMPTIONS_OUTPACE = "preemptions_outpace"
    DATA_TOO_SMALL = "data_too_small"  # the layout's global batch cannot be filled (enough times) from the events
    # a request's or policy's filter (``filters.FILTERS``) left the candidate out
    OTHER_TARGET = "other_target"  # not what a flag asks for (provider, region, accelerator, capacity, count, node shape)
    TOO_LITTLE_MEMORY = "too_little_memory"
    LOST_THERE = "lost_there"
    NOT_IN_POLICY = "not_in_policy"
    OVER_PRICE_CAP = "over_price_cap"
    NOTE = "note"  # information only (queue wait, expected preemption loss, price quality, speed basis, a scan's shape)


#: codes that make a candidate infeasible
BLOCKING = frozenset(c for c in Code if c is not Code.NOTE)
#: codes a pinned choice may go ahead with, noted (the budget guard still stops the run in time)
BUDGET_OR_DEADLINE = frozenset({Code.DEADLINE_PASSED, Code.MISSES_DEADLINE, Code.OVER_BUDGET})
#: codes that a policy's ``burst_when.deadline_missed`` reads as the deadline missed
DEADLINE = frozenset({Code.DEADLINE_PASSED, Code.MISSES_DEADLINE})


class Reason(str):
    """A sentence for the user with the code it stands for."""

    code: Code

    def __new__(cls, code: Code, text: str) -> "Reason":
        reason = super().__new__(cls, text)
        reason.code = code
        return reason

    def __reduce__(self):  # pickles (Ray, multiprocessing) keep the code
        return (Reason, (self.code, str(self)))


def code_of(reason: str) -> Code:
    return getattr(reason, "code", Code.NOTE)


def having(reasons: list[str], codes: frozenset[Code]) -> list[str]:
    """The reasons whose code is one of ``codes``."""
    return [r for r in reasons if code_of(r) in codes]
