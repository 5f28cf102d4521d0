"""Placement: where a run should go, decided from data (the policy, the price catalog, the
workload's measured profile) by pure functions; ``planner.plan`` ranks every target and
``planner.pin`` turns command-line flags into a ``Placement`` under the same policy rules."""
