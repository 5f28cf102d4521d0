"""A third workload for the registry test: calo's implementation under another name, registered
only by an entry in ``burst.workloads._REGISTRY`` (what adding a workload to burst takes)."""

from workloads.calo.workload import Calo


class Toy(Calo):
    name = "toy"
    title = "a third workload, registered by one table entry"
    presets = ("small",)


WORKLOAD = Toy()
