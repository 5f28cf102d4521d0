"""What a burst server and its clients agree on: which commands a member runs through the server,
which files travel with them, how a served process knows it is one, and how an option's value is
read from a command's words (both sides read them)."""

from __future__ import annotations

from typing import Optional

FORWARDED = ("plan", "up", "status", "down", "train", "run", "logs", "tune", "datasets", "workloads", "monitor")
# Prometheus' read API, as a server passes it on for a cluster's monitor (never its admin or write API)
PROMETHEUS_READS = ("query", "query_range", "query_exemplars", "series", "labels", "label", "metadata", "targets", "status")
MONEY_VERBS = ("plan", "up", "run", "train", "tune")  # held to what the member's team has left
SENT_WITH_COMMAND = ("--policy", "--gate", "--space")  # files the client reads on its machine and sends along
STORE_SCHEMES = ("gs", "gcs", "abfs", "abfss", "s3")  # what a member's --data may name through a server: a bucket, never a file there
UPLOAD = "@upload:"  # the word that stands, in the words sent, for the N-th file sent
SERVED_UPLOADS = "BURST_SERVED_UPLOADS"  # set in a process the server runs for a member: where that member's files are
SERVED_COMMIT_USD = "BURST_SERVED_COMMIT_USD"  # ... and what the cluster it makes may commit (reserved for it in the team's month)


def split_option(word: str) -> tuple[str, Optional[str]]:
    """``--opt=value`` -> (``--opt``, ``value``); any other word -> (the word, None)."""
    if word.startswith("--") and "=" in word:
        option, _, value = word.partition("=")
        return option, value
    return word, None


def option_value(words: list[str], option: str) -> Optional[str]:
    """The value ``option`` has in ``words`` (``--opt value`` or ``--opt=value``); None without one."""
    for i, word in enumerate(words):
        name, inline = split_option(word)
        if name == option:
            return inline if inline is not None else (words[i + 1] if i + 1 < len(words) else None)
    return None
