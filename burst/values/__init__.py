"""Values the layers hand each other, below all of them.

``placement`` decides and ``targets`` carry out; what passes between them (a catalog offer, a node
layout, an estimate, the placement itself, the on-prem site a policy describes) lives here, so that
neither package imports the other's modules to name it. Nothing here imports from ``burst`` but
``errors``, ``command_values`` and each other.
"""
