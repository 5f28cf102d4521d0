"""A managed run's moves as times: for each lost attempt, when its head last answered and when the
loss was judged; for the attempt after it, when its cluster was up, its job submitted and its first
step trained. `burst status RUN`, the web view and the run's report all say the same lines, read
from the attempts the controller records (``managed.Attempt``), so nothing here is measured twice.

The moment of a loss itself is not known to the controller: it lies between the last answer and
the judgement, and "judged N s after the last answer" bounds the wait for a judgement from above.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from .managed import Attempt, ManagedRun


class Move(BaseModel):
    """One move of a managed run: the attempt lost and the attempt after it (None while none started)."""

    lost: Attempt
    next: Optional[Attempt] = None

    @property
    def why(self) -> str:
        how = self.lost.how or ""
        return how.split("lost: ", 1)[1] if how.startswith("lost: ") else how

    def seconds(self) -> dict[str, Optional[float]]:
        """Each step of the move in seconds from the judgement (and the judgement from the last answer)."""
        judged, nxt = self.lost.ended, self.next

        def since(at: Optional[float]) -> Optional[float]:
            return round(at - judged, 1) if at is not None and judged is not None else None

        return {"answer_to_judged_s": round(judged - self.lost.last_seen, 1) if judged and self.lost.last_seen else None,
                "judged_to_up_s": since(nxt.cluster_up) if nxt else None,
                "judged_to_submitted_s": since(nxt.submitted) if nxt else None,
                "judged_to_first_step_s": since(nxt.first_step) if nxt else None}

    def line(self) -> str:
        """The move in one line, each time of day beside its seconds from the judgement."""
        lost, nxt, s = self.lost, self.next, self.seconds()
        parts = [f"attempt {lost.number} on {lost.provider or '?'} cluster {lost.cluster}"]
        if lost.last_seen is not None:
            parts.append(f"last answered {clock(lost.last_seen)}")
        judged = f"judged lost {clock(lost.ended)}" if lost.ended else "not judged yet"
        if s["answer_to_judged_s"] is not None:
            judged += f" ({s['answer_to_judged_s']:.1f} s after)"
        parts.append(f"{judged}: {self.why}")
        head = ", ".join(parts)
        if nxt is None:
            return head + "; no attempt after it"
        steps = [f"attempt {nxt.number} on {nxt.provider or '?'} cluster {nxt.cluster}"]
        for label, at, key in (("up", nxt.cluster_up, "judged_to_up_s"), ("submitted", nxt.submitted, "judged_to_submitted_s"),
                               ("first step", nxt.first_step, "judged_to_first_step_s")):
            steps.append(f"{label} {clock(at)} (+{s[key]:.1f} s)" if at is not None and s[key] is not None else f"{label} not yet")
        return f"{head} -> {', '.join(steps)}"


def moves(m: ManagedRun) -> list[Move]:
    """Every attempt that was lost, oldest first, with the attempt that followed it."""
    attempts = m.attempts
    return [Move(lost=a, next=attempts[i + 1] if i + 1 < len(attempts) else None)
            for i, a in enumerate(attempts) if (a.how or "").startswith("lost")]


def lines(m: ManagedRun) -> list[str]:
    return [move.line() for move in moves(m)]


def report_section(m: ManagedRun) -> str:
    """The moves as a section of the run's HTML report ("" when the run never moved)."""
    found = moves(m)
    if not found:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("attempt lost", "why", "last answered", "judged", "next cluster up", "submitted", "first step"))
    rows = []
    for move in found:
        lost, nxt, s = move.lost, move.next, move.seconds()

        def cell(at: Optional[float], key: Optional[str]) -> str:
            if at is None:
                return "<td>-</td>"
            offset = f" (+{s[key]:.1f} s)" if key and s[key] is not None else ""
            return f"<td>{clock(at)}{offset}</td>"

        rows.append(f"<tr><td>{lost.number} ({html.escape(lost.provider)} {html.escape(lost.cluster)})</td><td>{html.escape(move.why)}</td>"
                    + cell(lost.last_seen, None)
                    + (f"<td>{clock(lost.ended)} ({s['answer_to_judged_s']:.1f} s after)</td>" if lost.ended and s["answer_to_judged_s"] is not None
                       else cell(lost.ended, None))
                    + (cell(nxt.cluster_up, "judged_to_up_s") + cell(nxt.submitted, "judged_to_submitted_s")
                       + cell(nxt.first_step, "judged_to_first_step_s") if nxt else "<td>-</td>" * 3)
                    + "</tr>")
    return (f"<section id='moves'><h2>Moves</h2><p>Each lost cluster of this managed run, when its head last answered the "
            f"controller, when the loss was judged, and the next cluster's times from that judgement "
            f"(burst.unattended.timeline).</p><table><tr>{head}</tr>{''.join(rows)}</table></section>")


def add_to_report(page: Path, m: ManagedRun) -> bool:
    """The moves section written into the run's ``report.html`` (in place of one written before);
    False when there is no page or nothing moved."""
    section = report_section(m)
    if not section or not page.is_file():
        return False
    text = re.sub(r"<section id='moves'>.*?</section>", "", page.read_text(), flags=re.S)
    page.write_text(text.replace("</body>", section + "</body>", 1) if "</body>" in text else text + section)
    return True


def records(m: ManagedRun) -> list[dict]:
    """The moves for cost.json: which attempt was lost, why, and each step's seconds."""
    return [{"lost_attempt": move.lost.number, "why": move.why, "next_attempt": move.next.number if move.next else None,
             **move.seconds()} for move in moves(m)]


def clock(at: Optional[float]) -> str:
    """A time of day as the move lines say it ("-" for none)."""
    return time.strftime("%H:%M:%S", time.localtime(at)) if at is not None else "-"
