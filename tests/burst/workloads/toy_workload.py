"""A third workload for the registry test: calo's implementation under another name, registered
only by an entry point (group ``burst.workloads``), as an installed package registers its own."""

from workloads.calo.workload import Calo


class Toy(Calo):
    name = "toy"
    title = "a third workload, registered by one table entry"
    presets = ("small",)


WORKLOAD = Toy()
