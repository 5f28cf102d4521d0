"""The runtime: the training job that runs on a cluster (``entry``, with the Ray Train and TPU
drivers), the contract between it and the submitting side (``job``), submitting and following
it (``jobs``), the storage both sides read, and the budget guard."""
