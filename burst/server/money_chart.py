"""A month's money as an SVG chart for the web view: one bar per line (a team, a user, a target),
what is spent, what running clusters commit to their lease's end, and the budget as a mark.
Drawn here, as text, so that a page needs no chart library and no script."""

from __future__ import annotations

import math
from html import escape

from .money import Line

WIDTH, ROW, LABEL, PAD = 720, 34, 150, 10


def month_chart(lines: list[Line]) -> str:
    """The chart's SVG; every amount finite (a damaged budget is drawn as none)."""
    def finite(value) -> float:
        return value if isinstance(value, (int, float)) and math.isfinite(value) else 0.0

    scale_usd = max([1e-9] + [finite(x.spent_usd) + finite(x.committed_usd) for x in lines] + [finite(x.budget_usd) for x in lines])
    span = WIDTH - LABEL - 2 * PAD - 110
    height = PAD * 2 + ROW * max(1, len(lines)) + 22
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" aria-label="money this month, by line">']
    for i, line in enumerate(lines):
        y = PAD + i * ROW
        spent, promised, budget = finite(line.spent_usd), finite(line.committed_usd), finite(line.budget_usd)
        w_spent, w_promised = span * spent / scale_usd, span * promised / scale_usd
        x0 = LABEL + PAD
        out.append(f'<text x="{LABEL}" y="{y + 20}" text-anchor="end" class="label">{escape(line.key)}</text>')
        out.append(f'<rect x="{x0}" y="{y + 6}" width="{w_spent:.1f}" height="20" class="spent"><title>spent ${spent:,.2f}</title></rect>')
        out.append(f'<rect x="{x0 + w_spent:.1f}" y="{y + 6}" width="{w_promised:.1f}" height="20" class="committed">'
                   f'<title>committed ${promised:,.2f}</title></rect>')
        if line.budget_usd is not None and math.isfinite(line.budget_usd):
            xb = x0 + span * budget / scale_usd
            out.append(f'<line x1="{xb:.1f}" x2="{xb:.1f}" y1="{y + 2}" y2="{y + 30}" class="budget"><title>budget ${budget:,.2f}</title></line>')
        note = f"${spent + promised:,.2f}" + (f" of ${budget:,.2f}" if line.budget_usd is not None else "")
        out.append(f'<text x="{x0 + max(w_spent + w_promised, span * budget / scale_usd) + 8:.1f}" y="{y + 20}" class="note">'
                   f'{escape(note)}</text>')
    y = PAD + ROW * max(1, len(lines)) + 14
    out.append(f'<rect x="{LABEL + PAD}" y="{y - 10}" width="12" height="12" class="spent"/><text x="{LABEL + PAD + 16}" y="{y}" class="note">spent</text>')
    out.append(f'<rect x="{LABEL + PAD + 70}" y="{y - 10}" width="12" height="12" class="committed"/>'
               f'<text x="{LABEL + PAD + 86}" y="{y}" class="note">committed to lease ends</text>')
    out.append(f'<line x1="{LABEL + PAD + 260}" x2="{LABEL + PAD + 260}" y1="{y - 12}" y2="{y + 2}" class="budget"/>'
               f'<text x="{LABEL + PAD + 266}" y="{y}" class="note">budget</text>')
    out.append("</svg>")
    return "".join(out)
