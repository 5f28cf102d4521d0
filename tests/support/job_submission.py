"""What ``burst.client.jobs.submit`` hands Ray's Jobs API, caught before it leaves this process."""

from __future__ import annotations


def caught_submissions(monkeypatch) -> dict:
    """Replace the Jobs API client with one that keeps the arguments of each ``submit_job`` (the
    returned dict holds the latest) and saves no record; no cluster is needed."""
    from burst.client import jobs

    sent: dict = {}

    class Client:
        def submit_job(self, **kwargs):
            sent.clear()
            sent.update(kwargs)
            return kwargs["submission_id"]

    monkeypatch.setattr(jobs, "client", lambda handle: Client())
    monkeypatch.setattr(jobs.state, "save", lambda record: None)
    return sent
