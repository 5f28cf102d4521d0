"""Where candidates come from, one module per kind of target: this machine (``this_machine``), a
site of the user's own (``site``), a cloud's catalog (``cloud``). Each answers what its targets can
run for one request; the planner only ranks and explains. A new kind of target is a module here
and one line in ``SOURCES``.
"""

from __future__ import annotations

from typing import Callable

from . import cloud, site, this_machine
from .asked import Asked

__all__ = ["Asked", "SOURCES"]

#: the ``candidates(asked, providers)`` of each kind of target (``Target.kind``)
SOURCES: dict[str, Callable] = {"local": this_machine.candidates, "onprem": site.candidates, "cloud": cloud.candidates}
