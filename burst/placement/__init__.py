"""Placement: where a run should go, decided from data (the policy, the price catalog, the
workload's measured profile) and, where it may ask, from a site's scheduler (its queue now);
``sources`` answer what each kind of target can run, ``planner.plan`` ranks every candidate and
``planner.pin`` turns command-line flags into a ``Placement`` under the same policy rules. The
price lists a catalog refresh reads are asked only by ``burst catalog refresh``."""
