"""Pulumi programs that provision burst's cloud clusters, one module per stack, and their driver.

``spec`` holds what every program is built from (layout, lease, labels); ``gke``, ``tpu`` and
``aks`` are the programs; ``kuberay`` is the Ray layer GKE and AKS share; ``render`` runs a
program under Pulumi's mocks (``burst up --dry-run`` and the tests); ``driver`` runs it for real
through the Automation API. Nothing here is imported at CLI start-up.
"""
