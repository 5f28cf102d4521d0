"""Values the layers hand each other, below all of them.

``placement`` decides and ``targets`` carry out; what passes between them (a catalog offer, a node
layout, an estimate, the placement itself, the on-prem site a policy describes) lives here, so that
neither package imports the other's modules to name it; so do the values that cross from the
command line to the API (``command_values``). Nothing here imports from ``burst`` but ``errors``
and each other.
"""
