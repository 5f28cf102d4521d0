"""The command line as a burst server's client, and as the process a server runs a member's verb in.

Logged in (``burst login URL``), a forwarded command's words go to the server, with the files its
policy and gate options name; the server's answer is printed as the command would print it here.
Run by a server for a member (``BURST_SERVED_UPLOADS`` set), the command line refuses every path
that is not one of the files that member sent: the server's own files are not theirs to read."""

from __future__ import annotations

import os
import sys
import typing
from pathlib import Path, PurePath
from typing import Optional

from ..errors import BurstError
from ..values.served import FORWARDED, SENT_WITH_COMMAND, SERVED_UPLOADS, STORE_SCHEMES, UPLOAD, option_value, split_option

WORDS = "burst.words"  # where the group keeps the command's words (``ctx.meta``)


def _path_options(command) -> set[str]:
    """The options of ``command`` that name a file or directory: read from the command's own
    function (a ``Path`` in a parameter's type), so that a new one is covered the day it is added."""
    callback = getattr(command, "callback", None)
    hints = typing.get_type_hints(callback, include_extras=True) if callback is not None else {}
    return {opt for p in command.params if p.name in hints and _names_path(hints[p.name]) for opt in p.opts if opt.startswith("-")}


def _names_path(annotation) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return True
    return any(_names_path(inner) for inner in typing.get_args(annotation))


def forward(group, ctx) -> Optional[int]:
    """Send this command to the server logged in to; its exit code, or None when it runs here
    (not logged in, a command the server does not run, or this process is the server's)."""
    words = ctx.meta.get(WORDS) or []
    if not words or os.environ.get(SERVED_UPLOADS) or words[0] not in (*FORWARDED, "report"):
        return None
    from ..client import server

    login = server.current()
    if login is None:
        return None
    if words[0] == "report":
        return _report(server, login, words[1:])
    if words[0] == "monitor":
        return _monitor(server, login, words[1:])
    command = group.get_command(ctx, words[0])
    paths = _path_options(command) if command is not None else set()
    args, files = [], []
    rest = iter(words[1:])
    for word in rest:
        option, inline = split_option(word)
        if option not in paths:
            args.append(word)
            continue
        value = inline if inline is not None else next(rest, None)
        if value is None:
            args.append(word)
            continue
        if option not in SENT_WITH_COMMAND:
            raise BurstError(f"{option} names a file on this machine, which the burst server at {login.url} cannot read; "
                             "give it a store URI, or `burst logout` to run on this machine")
        try:
            files.append(Path(value).expanduser().read_text())
        except OSError as exc:
            raise BurstError(f"{option} {value}: {exc.strerror or exc}") from None
        args += [option, f"{UPLOAD}{len(files) - 1}"]
    if words[0] in ("train", "run", "tune"):
        data = option_value(args, "--data")
        if data is not None and not _in_a_store(data):
            raise BurstError(f"--data {data} is a directory on this machine, which the burst server at {login.url} cannot read: "
                             "stage it on a store first (gs://, abfs://) and give that URI, or `burst logout` to run here")
    answer = server.call(login, "POST", f"/v1/verbs/{words[0]}", {"args": args, "files": files})
    sys.stdout.write(answer.get("stdout", ""))
    sys.stderr.write(answer.get("stderr", ""))
    return int(answer.get("rc", 1))


def _report(server, login, words: list[str]) -> int:
    """A run's report through the server: where its web view shows it (the report is on the server,
    not here); ``--open`` opens that page in this machine's browser."""
    from urllib.parse import quote

    run_ids = [w for w in words if not w.startswith("-")]
    if len(run_ids) != 1:
        raise BurstError("give one run: burst report RUN [--open]")
    answer = server.call(login, "GET", f"/v1/runs/{quote(run_ids[0], safe='')}")
    if not answer.get("report"):
        raise BurstError(f"run {run_ids[0]} has no report yet (state {answer.get('state')})" +
                         (f": {answer['message']}" if answer.get("message") else ""), exit_code=1)
    url = login.url.rstrip("/") + answer["report"]
    if "--open" in words:
        import webbrowser

        webbrowser.open(url)
    print(f"{url}  (sign in to the web view with your token to read it)")
    return 0


def _monitor(server, login, words: list[str]) -> int:
    """A cluster's Prometheus through the server: started there as this member (``burst monitor`` on
    the server's machine, where the cluster answers), read here through the server's API with this
    member's token; ``--stop`` stops it. ``--port`` names a port on the server: refused."""
    import json

    if any(split_option(word)[0] == "--port" for word in words):
        raise BurstError("--port picks a port on this machine; through a burst server the cluster's Prometheus is on the server "
                         "and read through it: drop --port")
    names = [w for w in words if not w.startswith("-")]
    if len(names) != 1:
        raise BurstError("give one cluster: burst monitor NAME [--stop] [--json]")
    name, stop, as_json = names[0], "--stop" in words, "--json" in words
    answer = server.call(login, "POST", "/v1/verbs/monitor", {"args": [name, *(["--stop"] if stop else []), "--json"], "files": []})
    rc = int(answer.get("rc", 1))
    if rc != 0 or stop:
        sys.stdout.write(answer.get("stdout", ""))
        sys.stderr.write(answer.get("stderr", ""))
        return rc
    started = json.loads(answer["stdout"])
    me = server.call(login, "GET", "/v1/me")["user"]
    from urllib.parse import quote

    base = f"{login.url.rstrip('/')}/v1/monitor/{quote(me, safe='')}/{quote(name, safe='')}"
    shown = {"cluster": name, "owner": me, "url": base, "api": f"{base}/api/v1/query?query=...",
             "dashboards": [f"{base}/dashboards/{Path(p).name}" for p in started.get("dashboards", [])]}
    if as_json:
        print(json.dumps(shown, indent=1))
        return 0
    print(f"Prometheus for cluster {name} runs on the server; its API, for your team, at {base}/api/v1/ "
          f"(send your token: Authorization: Bearer ...; a Grafana data source takes the same URL and header)")
    print("a run's throughput: ray_burst_samples_per_second{run=\"RUN\"}; a node's CPU: ray_node_cpu_utilization")
    print(f"Grafana dashboards: {', '.join(shown['dashboards'])}")
    print(f"`burst monitor {name} --stop` or `burst down {name}` stops it")
    return 0


def check_paths(group, ctx) -> None:
    """In a process a server runs for a member: every path option must be a file that member sent,
    ``--data`` and ``--storage`` a store URI (a directory here is the server's), and no ``--bundle``
    (a directory a site's job installs from). Their policy has been read by the server already,
    refused where it says what only the site's admins may (``burst.server.site_policy``)."""
    uploads = os.environ.get(SERVED_UPLOADS)
    words = ctx.meta.get(WORDS) or []
    if not uploads or not words:
        return
    command = group.get_command(ctx, words[0])
    paths = _path_options(command) if command is not None else set()
    allowed = Path(uploads).resolve()
    rest = iter(words[1:])
    for word in rest:
        option, inline = split_option(word)
        if option in paths:
            value = inline if inline is not None else next(rest, "")
            if allowed not in Path(value).resolve().parents:
                raise BurstError(f"{option} {value}: through a burst server, {option} takes a file sent with the command; "
                                 "the server's own files are not yours to read")
        elif option == "--bundle":
            raise BurstError("--bundle: through a burst server, what a site's nodes install from is the admins' word; "
                             "leave --bundle out (an admin sets the site in `burst server admin policy`)")
        elif option == "--storage":
            value = inline if inline is not None else next(rest, "")
            if not _in_a_store(value):
                raise BurstError(f"--storage {value}: through a burst server, a store is a bucket URI (gs://, abfs://), not a directory "
                                 "of the server's; without --storage your runs keep their files in your own directory there")
        elif option == "--store" and words[0] == "datasets":
            value = inline if inline is not None else next(rest, "")
            from ..api import known_stores

            if value not in known_stores():
                raise BurstError(f"--store {value}: through a burst server, `burst datasets` looks at and removes from your own stores "
                                 "only (those your clusters and runs use; `burst datasets` without --store lists them)")
        elif option == "--data":
            value = inline if inline is not None else next(rest, "")
            if not _in_a_store(value):
                raise BurstError(f"--data {value}: through a burst server, a dataset is a store URI (gs://, abfs://), not a server directory")


def _in_a_store(value: str) -> bool:
    """A bucket URI (``file://`` and other schemes name the server's own disk)."""
    scheme, sep, _ = value.partition("://")
    return bool(sep) and scheme.lower() in STORE_SCHEMES
