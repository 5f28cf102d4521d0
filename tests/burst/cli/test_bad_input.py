"""A corpus of hostile input, one sample per class that once gave a traceback, a hang or a silent
acceptance: each must now be one line on stderr, exit code 2, and no traceback. In-process
(Typer's runner) so the whole corpus takes a second or two."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burst.cli import app


def _laughs(levels: int = 9, fanout: int = 9, under: str = "lol") -> str:
    """YAML aliases whose expansion doubles... nine-folds per level (a "billion laughs")."""
    lines = [f"a0: &a0 [{', '.join(['x'] * fanout)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]")
    body = "\n".join("  " + line for line in lines)
    return f"objective: min_cost\n{under}:\n{body}\n"


POLICIES = {
    # not UTF-8 text
    "binary": (bytes(range(256)) * 4, "not UTF-8 text (byte 0x80 at offset 128)"),
    "latin-1 comment": ("# coût estimé\nobjective: min_cost\n".encode("latin-1"), "not UTF-8 text"),
    "utf-16 with BOM": ("objective: min_cost\n".encode("utf-16"), "is UTF-16 text; save it as UTF-8"),
    "NUL bytes": (b"objective: min_cost\n\x00\x00", "binary file"),
    # documents that blew the YAML reader's recursion or ran for minutes
    "deep flow sequence": (("x: " + "[" * 1000 + "]" * 1000).encode(), "nested more than 32 levels deep"),
    "deep flow mapping": (("x: " + "{a: " * 900 + "1" + "}" * 900).encode(), "nested more than 32 levels deep"),
    "deep block mapping": ("\n".join(" " * i + "a:" for i in range(1000)).encode(), "nested more than 32 levels deep"),
    "billion laughs, unknown key": (_laughs().encode(), "expands to more than 20000 YAML nodes"),
    "billion laughs, in regions": (_laughs(under="regions").encode(), "expands to more than 20000 YAML nodes"),
    # accepted nonsense
    "deadline: true": (b"deadline: true\n", "deadline"),
    "budget_usd: true": (b"budget_usd: true\n", "budget_usd: Input should be a valid number"),
    "max_gpus: true": (b"max_gpus: true\n", "max_gpus: Input should be a valid integer"),
    "budget .inf": (b"budget_usd: .inf\n", "budget_usd: Input should be a finite number"),
    "deadline .nan": (b"deadline: .nan\n", "deadline"),
    "on-prem price .inf": (b"onprem: {accelerator: V100, gpus: 8, usd_per_gpu_hour: .inf}\n", "onprem.usd_per_gpu_hour: Input should be a finite number"),
    "queue wait .inf": (b"onprem: {accelerator: V100, gpus: 8, usd_per_gpu_hour: 1, queue_wait_hours: .inf}\n", "queue_wait_hours"),
    "data size 1e300 GB": (b"data: {size_gb: 1.0e+300}\n", "data.size_gb: Input should be less than or equal to"),
    "uplink 1e-300 Gbit/s": (b"data: {uplink_gbps: 1.0e-300}\n", "data.uplink_gbps: Input should be greater than or equal to 0.001"),
    "preemption 9.99/h": (b"preemption_rate_per_hour: {gcp: 9.99}\n", "between 0 and 2.0"),
    "max_gpus 1e30": (b"max_gpus: 1.0e+30\n", "max_gpus: Input should be a valid integer"),
    "deadline in 100 years": (b"deadline: 876000\n", "more than a year"),
    # "valid" nothing
    "empty file": (b"", "the policy is empty"),
    "document marker only": (b"---\n", "the policy is empty"),
    "comments only": (b"# objective: min_cost\n", "the policy is empty"),
}


def _one_line_error(result, fragment: str) -> None:
    err = result.stderr
    assert result.exit_code == 2, (result.exit_code, result.output, err)
    assert "Traceback" not in err and result.exception is None or isinstance(result.exception, SystemExit)
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert fragment in err, err


@pytest.mark.parametrize("content, fragment", list(POLICIES.values()), ids=list(POLICIES))
def test_bad_policy_is_one_line(tmp_path, monkeypatch, content, fragment):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    path = tmp_path / "policy.yaml"
    path.write_bytes(content)
    for args in (["policy", "check", str(path)], ["plan", "--policy", str(path)]):
        _one_line_error(CliRunner().invoke(app, args), fragment)


def test_utf8_with_byte_order_mark_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    path = tmp_path / "policy.yaml"
    path.write_bytes("\ufeffobjective: min_time  # café\n".encode())
    result = CliRunner().invoke(app, ["policy", "check", str(path)])
    assert result.exit_code == 0, result.stderr


def test_catalog_with_a_header_and_no_rows_is_an_error(tmp_path, monkeypatch):
    from burst.catalog.offers import COLUMNS

    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    path = tmp_path / "catalog.csv"
    path.write_text("# prices\n" + ",".join(COLUMNS) + "\n")
    _one_line_error(CliRunner().invoke(app, ["plan", "--catalog", str(path)]), "has a header and no offers")
    path.write_bytes(b"\xff\xfeprovider")
    _one_line_error(CliRunner().invoke(app, ["plan", "--catalog", str(path)]), "UTF-16")


@pytest.mark.parametrize("hours", ["nan", "inf", "1e308", "-1", "0"])
def test_lease_hours_must_be_a_sane_number(tmp_path, monkeypatch, hours):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["up", "--provider", "gcp", "--dry-run", "--hours", hours])
    _one_line_error(result, "--hours must be a number of hours above 0")


def test_json_output_never_holds_non_finite_numbers(monkeypatch, tmp_path):
    from burst.cli.render import emit_json

    printed = []
    monkeypatch.setattr("typer.echo", lambda text, **_: printed.append(text))
    emit_json({"time_h": float("inf"), "rows": [1.5, float("nan"), {"cost": float("-inf")}]})
    assert json.loads(printed[0]) == {"time_h": None, "rows": [1.5, None, {"cost": None}]}


# Values a shared policy file or a flag hands to ssh, sbatch or a manifest: each must fit its narrow form.
HOSTILE_SITE = {
    "ssh option as login": ('login: "-oProxyCommand=touch {marker}"', "onprem.login"),
    "ssh option after user@": ('login: "me@-oProxyCommand=touch {marker}"', "onprem.login"),
    "command in login": ('login: "host; touch {marker}"', "onprem.login"),
    "newline in partition": ('partition: "gpu\\n#SBATCH --wrap=touch {marker}"', "onprem.partition"),
    "option as account": ('account: "--wrap=touch {marker}"', "onprem.account"),
    "shell in qos": ('qos: "$(touch {marker})"', "onprem.qos"),
    "relative container": ('container: "image; touch {marker}"', "onprem.container"),
}


@pytest.mark.parametrize("line, field", list(HOSTILE_SITE.values()), ids=list(HOSTILE_SITE))
def test_site_values_that_would_reach_a_shell_are_one_line(tmp_path, monkeypatch, line, field):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    marker = tmp_path / "pwned"
    path = tmp_path / "policy.yaml"
    path.write_text("providers: [slurm]\nonprem:\n  scheduler: slurm\n  accelerator: V100\n  gpus: 8\n  " + line.format(marker=marker) + "\n")
    for args in (["policy", "check", str(path)], ["plan", "--policy", str(path)], ["up", "--provider", "slurm", "--policy", str(path)]):
        _one_line_error(CliRunner().invoke(app, args), f"{field}: Value error")
    assert not marker.exists() and not (tmp_path / "home" / "clusters").exists()


@pytest.mark.parametrize("args, fragment", [
    (["up", "--provider", "slurm", "--partition", "-x --wrap=id"], "--partition '-x --wrap=id' is not allowed"),
    (["up", "--provider", "gcp", "--dry-run", "--image", "ray\nkind: Pod"], "--image 'ray\\nkind: Pod' is not allowed"),
    (["up", "--provider", "gcp", "--dry-run", "--image", "--help"], "--image '--help' is not allowed"),
])
def test_flags_that_would_reach_sbatch_or_a_manifest_are_one_line(tmp_path, monkeypatch, args, fragment):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    policy = tmp_path / "policy.yaml"
    policy.write_text("providers: [slurm, gcp]\nonprem:\n  scheduler: slurm\n  accelerator: V100\n  gpus: 8\n")
    _one_line_error(CliRunner().invoke(app, [*args, "--policy", str(policy)]), fragment)


@pytest.mark.parametrize("name", ["[/x]", "[bold]x", "[red]"])
def test_a_name_that_looks_like_markup_is_shown_as_written(tmp_path, monkeypatch, name):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["up", "--name", name])
    _one_line_error(result, f"cluster name {name!r} is not allowed")


def test_messages_are_printed_as_written(capsys):
    """Reporter lines carry paths and other programs' words: a '[/x]' in them is text, not a style tag."""
    from burst.cli.render import ConsoleReporter

    ConsoleReporter().say("copying /data/[/x]/[bold]run to gs://b")
    assert "copying /data/[/x]/[bold]run to gs://b" in capsys.readouterr().err
