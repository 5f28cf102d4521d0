"""burst: take a training workload from this machine to whatever hardware a policy allows."""

__version__ = "0.1.0"
