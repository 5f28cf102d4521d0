"""The Automation API driver against a recording stand-in for the Pulumi CLI (no CLI here, no cloud).

The stand-in is a ``PulumiCommand`` subclass, the seam Pulumi's Automation API offers for this:
it records every CLI call and answers like the CLI would.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from pulumi import automation as auto
from pulumi.automation.errors import create_command_error


from burst.home import state
from burst import targets
from burst.errors import BurstError
from burst.catalog import offers as catalog
from burst.placement import layout, planner, policy, profile
from burst.placement.request import PlacementRequest
from burst.home.state import ClusterHandle
from burst.targets.base import Lease, Reporter
from burst.targets import google_cloud
from infra.driver import BurstPulumiCommand, StackDriver
from tests.support import cloud_api
from tests.fakes.pulumi_cli import URN, RecordingPulumi, pulumi_command

@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path))
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    for provider in targets.names_of_kind("cloud"):  # CLI and credentials: tested below
        monkeypatch.setattr(targets.get(provider), "missing_prerequisites", lambda: [])
    monkeypatch.setattr(google_cloud, "google_session", lambda: cloud_api.session()[0])  # the pre-flight: tests/burst/targets/test_preflight.py
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    return tmp_path


def spec_for(n=8):
    lay = layout.resolve(catalog.load(), "gcp", "V100", n, region="us-central1")
    return targets.get("gcp").build_spec("t", lay, True, hours=2, lease_id="lease0123456", project="proj")


def gke_up(fake):
    """`burst up --provider gcp --gpus 8 --accelerator V100 --region us-central1 --preemptible`, pinned as the CLI pins it."""
    placement = planner.pin(policy.load(None), profile.load("gan3d"), catalog.load(), PlacementRequest(provider="gcp", gpus=8, accelerator="V100", preemptible=True, region="us-central1"))
    with pulumi_command(fake) as gke:
        return gke.up("t", placement, Lease(hours=2))


def test_up_issues_the_expected_cli_commands(home):
    fake = RecordingPulumi()
    outputs = StackDriver(spec_for(), state.home(), command=fake).up()
    assert outputs["storage_uri"] == "gs://b"
    cmds = fake.commands()
    assert cmds[:2] == ["stack select", "stack init"]
    init = next(c for c in fake.calls if c[:2] == ["stack", "init"])
    assert "--secrets-provider" in init and init[init.index("--secrets-provider") + 1] == "passphrase"
    assert "config set-all" in cmds and cmds.index("config set-all") < cmds.index("up")
    up = next(c for c in fake.calls if c[0] == "up")
    assert {"--yes", "--skip-preview"} <= set(up) and up[up.index("--stack") + 1] == "t-lease012"
    config = next(c for c in fake.calls if c[:2] == ["config", "set-all"])
    assert "gcp:project=proj" in config and "gcp:region=us-central1" in config
    # local file backend under the state directory, passphrase generated once, user-only
    pulumi_yaml = (home / "pulumi" / "work" / "t-lease012" / "Pulumi.yaml").read_text()
    assert f"file://{home}/pulumi/backend" in pulumi_yaml
    assert oct((home / "pulumi" / "passphrase").stat().st_mode & 0o777) == "0o600"


def test_backend_and_passphrase_from_the_environment(home, monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "gs://team-state")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "from-env")
    StackDriver(spec_for(), state.home(), command=RecordingPulumi()).up()
    assert "gs://team-state" in (home / "pulumi" / "work" / "t-lease012" / "Pulumi.yaml").read_text()
    assert not (home / "pulumi" / "passphrase").exists()


def test_a_failed_up_destroys_what_it_created_and_forgets_the_cluster(home):
    fake = RecordingPulumi(fail_up=True)
    with pytest.raises(BurstError, match="Quota 'NVIDIA_V100_GPUS' exceeded; everything it created was destroyed"):
        gke_up(fake)
    cmds = fake.commands()
    assert cmds.index("up") < cmds.index("destroy") < cmds.index("stack export")
    assert "stack rm" in cmds
    assert state.load(ClusterHandle, "t") is None


def test_the_region_store_is_made_before_the_cluster_is_granted_it_and_outlives_its_down(home):
    """The store (infra.store) is a stack of its own: made (or updated) before the cluster's stack,
    the cluster's spec names it, and `burst down` destroys the cluster's stack alone."""
    fake = RecordingPulumi()
    gke = targets.get("gcp")
    built = []
    original = type(gke).build_spec
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(gke), "build_spec", lambda self, *a, **kw: built.append(original(self, *a, **kw)) or built[-1])
        handle, created = gke_up(fake)
    stores = fake.commands(fake.store_calls)
    assert "up" in stores and "destroy" not in stores
    store_up = next(c for c in fake.store_calls if c[0] == "up")
    assert store_up[store_up.index("--stack") + 1] == "store-gcs-us-central1"
    assert built[-1].store_uri == "gs://store-bucket"  # the store stack's output, granted to the cluster
    with pulumi_command(fake) as gke:
        gke.down(handle)
    assert fake.commands(fake.store_calls).count("destroy") == 0 and fake.commands().count("destroy") == 1
    assert targets.get("gcp").storage_outlives(handle)  # a managed move reads the lost cluster's checkpoints in place


def test_a_store_that_cannot_be_made_creates_no_cluster(home):
    fake = RecordingPulumi(fail_store=True)
    with pytest.raises(BurstError, match=r"the store gs://burst-us-central1-\w+ of us-central1 could not be made .*storage.buckets.create denied.*no cluster was created"):
        gke_up(fake)
    assert "up" not in fake.commands() and state.load(ClusterHandle, "t") is None


class StockedOut(RecordingPulumi):
    """`up` fails for want of capacity in the zones listed in ``full`` (as GKE words it)."""

    def __init__(self, full):
        super().__init__()
        self.full = full

    def run(self, args, cwd, additional_env, on_output=None, on_error=None):
        if args and args[0] == "up" and "--stack" in args and not args[args.index("--stack") + 1].startswith("store-"):
            self.calls.append(args)
            zone = self.spec_zone()
            if zone in self.full:
                raise create_command_error(auto.CommandResult("", f"error: googleapi: Error 400: GCE_STOCKOUT: The zone "
                                                              f"'projects/proj/zones/{zone}' does not have enough resources available "
                                                              "to fulfill the request.", 255))
            return auto.CommandResult("", "", 0)
        return super().run(args, cwd, additional_env, on_output, on_error)

    def spec_zone(self):
        return state.load(ClusterHandle, "t").outputs["zone"]


def test_a_stocked_out_zone_is_retried_in_the_next_zone_offering_the_gpu(home):
    fake = StockedOut(full={"us-central1-a"})
    handle, created = gke_up(fake)
    assert created and handle.state == "running"
    assert [p["zone"] for p in handle.layout["pools"]] == ["us-central1-b"] and handle.outputs["zone"] == "us-central1-b"
    cmds = fake.commands()
    assert cmds.count("up") == 2 and cmds.index("destroy") < len(cmds) - 1 - cmds[::-1].index("up")  # destroyed before the retry


def test_every_zone_stocked_out_is_one_line_and_nothing_is_left(home):
    fake = StockedOut(full={"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"})
    with pytest.raises(BurstError) as err:
        gke_up(fake)
    assert str(err.value).startswith("creating cluster 't' on gcp failed: no capacity for V100 in us-central1-a, us-central1-b, us-central1-c, us-central1-f")
    assert fake.commands().count("up") == 4 and fake.commands().count("destroy") == 4
    assert state.load(ClusterHandle, "t") is None


def test_down_retries_then_names_what_is_left_and_keeps_the_handle(home, monkeypatch):
    fake = RecordingPulumi()
    gke = targets.get("gcp")
    built = []
    original = type(gke).build_spec
    monkeypatch.setattr(type(gke), "build_spec", lambda self, *a, **kw: built.append(original(self, *a, **kw)) or built[-1])
    handle, created = gke_up(fake)
    assert created and handle.state == "running" and handle.storage_uri == "gs://b"
    assert "kubeconfig" not in handle.outputs  # secrets never reach the state directory
    # the handle holds the path of the token the stack's heads require, readable by the user only
    token = Path(handle.token_path)
    assert token.read_text().strip() == built[-1].auth_token and len(built[-1].auth_token) == 64
    assert oct(token.stat().st_mode & 0o777) == "0o600" and built[-1].auth_token not in (home / "clusters" / "t.json").read_text()
    stuck = RecordingPulumi(leftover_destroys=5)
    stuck.stacks = fake.stacks
    with pytest.raises(BurstError) as err:
        with pulumi_command(stuck) as gke:
            gke.down(handle)
    assert URN in str(err.value) and "handle is kept" in str(err.value)
    assert stuck.commands().count("destroy") == 2 and "refresh" in stuck.commands()
    assert state.load(ClusterHandle, "t") is not None
    # the cause is fixed: the second `burst down` succeeds and forgets the handle
    healed = RecordingPulumi(leftover_destroys=0)
    healed.stacks = fake.stacks
    with pulumi_command(healed) as gke:
        gke.down(state.load(ClusterHandle, "t"))
    assert state.load(ClusterHandle, "t") is None and not token.exists()


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as burst's CLI makes sure it does (``burst.cli.main``); a test
    process started in the background by a shell inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_is_forwarded_to_pulumi_and_followed_by_a_refresh(home, ctrl_c_raises):
    fake = RecordingPulumi(block_up=True)
    driver = StackDriver(spec_for(), state.home(), command=fake)
    def ctrl_c_once_up_runs():  # Ctrl-C while `pulumi up` is running, not before it started
        assert fake.blocking.wait(30)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_once_up_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        driver.up()
    cmds = [" ".join(c) for c in fake.calls]
    interrupt_at = cmds.index("<SIGINT>")
    refresh = next(i for i, c in enumerate(fake.calls) if c[0] == "refresh")
    assert refresh > interrupt_at and "--clear-pending-creates" in fake.calls[refresh]


def test_interrupt_sends_exactly_one_sigint_to_the_running_cli():
    import subprocess
    import sys

    cmd = BurstPulumiCommand.__new__(BurstPulumiCommand)
    cmd.process = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                    "signal.signal(signal.SIGINT, lambda *a: (print('graceful'), sys.exit(3)))\n"
                                    "print('ready', flush=True)\ntime.sleep(30)"],
                                   stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert cmd.process.stdout.readline().strip() == "ready"  # its handler is installed: interrupt now
    assert cmd.interrupt() is True
    assert cmd.process.wait(10) == 3 and "graceful" in cmd.process.stdout.read()
    assert cmd.interrupt() is False  # already finished: nothing sent


def script_cli(tmp_path: Path, name: str, seconds: float) -> BurstPulumiCommand:
    """The real command class with a script as its CLI: it says `ready`, then sleeps ``seconds`` and
    exits 0; a SIGINT makes it say `canceled` and exit 3 (its handler is set, and SIGINT unblocked,
    whatever it inherited: a test worker may have it ignored or blocked)."""
    import sys

    script = tmp_path / name
    script.write_text(f"#!{sys.executable}\nimport signal, sys, time\n"
                      "signal.signal(signal.SIGINT, lambda *a: (print('canceled', flush=True), sys.exit(3)))\n"
                      "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
                      f"print('ready', flush=True)\ntime.sleep({seconds})\n")
    script.chmod(0o755)
    cmd = BurstPulumiCommand.__new__(BurstPulumiCommand)
    cmd.command = str(script)
    return cmd


def test_a_ctrl_c_before_the_cli_started_cancels_it_as_soon_as_it_starts(tmp_path, ctrl_c_raises):
    """A Ctrl-C can come while the operation's thread is starting, before Pulumi's process exists:
    it is held and sent when the process starts, not lost to a `pulumi up` that runs on.
    (``ctrl_c_raises``: as under burst's CLI, the CLI starts with SIGINT's default action; started
    with it ignored, as under a background test worker, a SIGINT landing before its handler is set
    would be lost.)"""
    up = script_cli(tmp_path, "slow-pulumi", 10)
    assert up.interrupt() is False  # nothing to signal yet: held
    started = time.monotonic()
    with pytest.raises(auto.CommandError):
        up.run(["up"], str(tmp_path), {})
    assert time.monotonic() - started < 6 and not up.interrupt_pending  # not the 10 s it sleeps


def test_a_ctrl_c_held_after_the_operation_ended_does_not_cancel_the_refresh(tmp_path, ctrl_c_raises):
    """(``ctrl_c_raises``: the CLI starts with SIGINT's default action, as under burst's CLI; started
    with it ignored, a wrongly sent SIGINT would go unseen and this test could not fail.)"""
    refresh = script_cli(tmp_path, "quick-pulumi", 2)  # long enough for a SIGINT sent at its start to land, under any load
    assert refresh.interrupt() is False and refresh.interrupt_pending  # came as the operation ended
    refresh.forget_interrupt()  # what the driver does once the interrupted operation is over
    assert refresh.run(["refresh"], str(tmp_path), {}).stdout.strip() == "ready"


def test_expired_leases_are_swept(home, monkeypatch):
    from typer.testing import CliRunner

    from burst import cli

    for name, expires in (("old", time.time() - 60), ("fresh", time.time() + 3600)):
        with state.locked():
            state.save(ClusterHandle(name=name, provider="gcp", cluster_id=name, state="running", storage_uri="gs://x",
                                     expires=expires, stack=f"{name}-stack"))
    destroyed = []
    monkeypatch.setattr(targets.get("gcp"), "down", lambda handle, report=None: destroyed.append(handle.name))
    result = CliRunner().invoke(cli.app, ["down", "--expired"])
    assert result.exit_code == 0, result.output
    assert destroyed == ["old"]


@pytest.mark.parametrize("provider, env, files, fragments", [
    ("gcp", {}, [], ["Pulumi CLI is not installed", "gcloud auth application-default login", "GOOGLE_CLOUD_PROJECT"]),
    ("gcp", {"GOOGLE_APPLICATION_CREDENTIALS": "/no/key.json", "GOOGLE_CLOUD_PROJECT": "p"}, [], ["/no/key.json, which does not exist"]),
    ("azure", {}, [], ["Pulumi CLI is not installed", "run `az login`"]),
    ("azure", {"ARM_CLIENT_ID": "x"}, [], ["incomplete Azure service principal"]),
])
def test_missing_cli_and_credentials_are_named_with_the_fix(tmp_path, provider, env, files, fragments):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BURST_HOME": str(tmp_path / "b"), **env}
    args = ["--provider", provider, "--gpus", "8", "--accelerator", "V100" if provider == "gcp" else "A100-80GB",
            "--region", "us-central1" if provider == "gcp" else "eastus"]
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "up", *args], capture_output=True, text=True, env=clean, cwd=root, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not list((tmp_path / "b").glob("clusters/*.json"))  # nothing recorded, nothing created


def test_pulumi_events_drive_the_progress_display():
    import io

    from pulumi.automation import events as ev
    from rich.console import Console

    buf = io.StringIO()
    from burst.cli.progress import PulumiProgress

    progress = PulumiProgress("creating", Console(file=buf, width=120, force_terminal=False), 2)

    def meta(op, typ, name):
        return ev.StepEventMetadata(op=op, urn=f"urn:pulumi:s::burst::{typ}::{name}", type=typ, provider="")

    with progress:
        for typ, name in (("gcp:container/cluster:Cluster", "c"), ("gcp:container/nodePool:NodePool", "gpu0")):
            progress.on_event(ev.EngineEvent(1, 0, resource_pre_event=ev.ResourcePreEvent(meta(ev.OpType.CREATE, typ, name))))
            progress.on_event(ev.EngineEvent(2, 0, res_outputs_event=ev.ResOutputsEvent(meta(ev.OpType.CREATE, typ, name))))
        progress.on_event(ev.EngineEvent(3, 0, res_op_failed_event=ev.ResOpFailedEvent(meta(ev.OpType.CREATE, "gcp:storage/bucket:Bucket", "b"), 1, 1)))
    assert progress.done == 2 and progress.failed == ["Bucket b"]
    assert "2/2" in buf.getvalue() and "failed" in buf.getvalue()


def test_two_ups_of_one_name_create_one_stack(home, monkeypatch):
    """The name is claimed before the pre-flight and the stack: a second `up` while the first is still
    asking the provider finds the first's claim and creates nothing (it used to create a second
    stack, one of which nothing would ever tear down)."""
    fake = RecordingPulumi()
    gke = targets.get("gcp")
    first_in_preflight, release_first = threading.Event(), threading.Event()
    original = type(gke).preflight
    first = {}

    def slow_preflight(self, placement, report=None):
        if threading.current_thread() is first.get("thread"):
            first_in_preflight.set()
            release_first.wait(10)
        return original(self, placement)

    monkeypatch.setattr(type(gke), "preflight", slow_preflight)
    monkeypatch.setattr(gke, "command", fake, raising=False)  # one stand-in for both `up`s
    placement = planner.pin(policy.load(None), profile.load("gan3d"), catalog.load(), PlacementRequest(provider="gcp", gpus=8, accelerator="V100", preemptible=True, region="us-central1"))

    def run_first():
        try:
            first["result"] = gke.up("t", placement, Lease(hours=2))
        except BaseException as exc:  # noqa: BLE001 - the thread's outcome is checked below
            first["error"] = exc

    first["thread"] = threading.Thread(target=run_first)
    first["thread"].start()
    assert first_in_preflight.wait(10)
    try:
        with pytest.raises(BurstError, match="cluster 't' is (being created|recorded)"):
            gke.up("t", placement, Lease(hours=2))
    finally:
        release_first.set()
        first["thread"].join(30)
    assert "error" not in first, first.get("error")
    handle, created = first["result"]
    assert created and handle.state == "running"
    assert fake.commands().count("stack init") == 1 and fake.commands().count("up") == 1
    assert state.load(ClusterHandle, "t").cluster_id == handle.cluster_id


def test_a_stack_whose_starter_died_is_waited_for_and_adopted_never_destroyed_under_pulumi(home):
    """A controller killed during `pulumi up` leaves the CLI creating in its own session: the revived
    controller's `adopt` waits while a Pulumi process works on the stack, then takes the stack's
    outputs, and the cluster is running; nothing is destroyed meanwhile."""
    import subprocess
    import sys

    fake = RecordingPulumi()
    gke = targets.get("gcp")
    handle = ClusterHandle(name="t", provider="gcp", cluster_id="lease0123456", state="starting", storage_uri="", stack="t-lease012",
                           starter_pid=2**31 - 2, created=time.time())
    state.save(handle)
    fake.stacks.add("t-lease012")
    busy = home / "bin"
    busy.mkdir()
    (busy / "pulumi").write_text(f"#!{sys.executable}\nimport time\ntime.sleep(2.5)\n")
    (busy / "pulumi").chmod(0o755)
    creating = subprocess.Popen([str(busy / "pulumi"), "up", "--yes", "--stack", "t-lease012"])  # the CLI the dead starter left
    started = time.time()
    with pulumi_command(fake) as gke:
        adopted = gke.adopt(handle, poll_s=0.1)
    creating.wait(5)
    assert time.time() - started >= 2.0  # it waited for the CLI to finish
    assert adopted is not None and adopted.state == "running" and adopted.storage_uri == "gs://b"
    assert "destroy" not in fake.commands() and "up" not in fake.commands()
    assert state.load(ClusterHandle, "t").state == "running"


def test_a_store_keeps_its_lifecycle_through_later_ups_and_changes_it_only_when_told(home, monkeypatch):
    """Issue 64, finding 2: every cloud `up` brought the region's store stack up with the policy it
    was given, so a default `up` after one with `checkpoints_days: 365` set 30 days, and the bucket
    deleted the checkpoints of stopped runs waiting to resume. Now the store's rules live in its
    stack's configuration: a later `up` keeps them (and says so), and `burst store lifecycle`
    changes them, one rule at a time."""
    from typer.testing import CliRunner

    from burst.lifecycle import placing
    from burst.cli import app
    from tests.fakes.pulumi_cli import pulumi_command

    fake = RecordingPulumi()
    long_kept = policy.parse("stores: {checkpoints_days: 365}")
    placement = planner.pin(long_kept, profile.load("gan3d"), catalog.load(),
                            PlacementRequest(provider="gcp", gpus=8, accelerator="V100", preemptible=True, region="us-central1"))
    said = []
    report = type("Said", (), {"say": lambda self, m: said.append(m), "stack_progress": Reporter.stack_progress})()
    with pulumi_command(fake) as gke:
        gke.ensure_store(placing.in_store(placement, long_kept), report)
        assert fake.config["store-gcs-us-central1"]["burst:checkpointsDays"] == "365"
        gke.ensure_store(placing.in_store(placement, policy.load(None)), report)  # a colleague's default policy, a later `up`
    assert fake.config["store-gcs-us-central1"]["burst:checkpointsDays"] == "365"  # the rule the bucket was made with stays
    assert any("keeps its lifecycle (checkpoints 365 d, datasets 90 d, notices 7 d); the policy says checkpoints 30 d" in m for m in said), said
    monkeypatch.setattr(type(targets.get("gcp")), "command", fake)
    monkeypatch.setattr(type(targets.get("gcp")), "check_prerequisites", lambda self, action: None)
    changed = CliRunner().invoke(app, ["store", "lifecycle", "--provider", "gcp", "--region", "us-central1", "--checkpoints-days", "60"])
    assert changed.exit_code == 0, changed.output
    assert fake.config["store-gcs-us-central1"]["burst:checkpointsDays"] == "60"
    assert fake.config["store-gcs-us-central1"]["burst:datasetsDays"] == "90"  # the rule not named stays as the store has it
    refused = CliRunner().invoke(app, ["store", "lifecycle", "--provider", "gcp", "--region", "us-central1"])
    assert refused.exit_code == 2 and "say which rule to change" in refused.output


def test_a_cluster_records_the_days_its_store_keeps_datasets_as_the_store_holds_them(home, monkeypatch):
    """What staging needs to protect an expiring dataset while the cluster reads it: the store's own
    rule (kept in its stack, not the policy's), on the cluster's record; none for a store the
    policy names (its rules are not burst's)."""
    from typer.testing import CliRunner

    from burst.cli import app

    fake = RecordingPulumi()
    monkeypatch.setattr(type(targets.get("gcp")), "command", fake)
    monkeypatch.setattr(type(targets.get("gcp")), "check_prerequisites", lambda self, action: None)
    made = CliRunner().invoke(app, ["store", "lifecycle", "--provider", "gcp", "--region", "us-central1", "--datasets-days", "45"])
    assert made.exit_code == 0, made.output
    handle, _ = gke_up(fake)  # the default policy says 90 days
    assert handle.datasets_days == 45 and state.load(ClusterHandle, "t").datasets_days == 45
    team = policy.parse("stores: {named: {gcp: gs://team-bucket}}")
    named = planner.pin(team, profile.load("gan3d"), catalog.load(),
                        PlacementRequest(provider="gcp", gpus=8, accelerator="V100", preemptible=True, region="us-central1"))
    from burst.lifecycle import placing

    with pulumi_command(fake) as gke:
        assert gke.ensure_store(placing.in_store(named, team)) == ("gs://team-bucket", None, None)


def test_a_watcher_takes_down_what_is_left_once_the_keeper_ended_an_idle_gke_cluster(home, tmp_path, monkeypatch):
    """Issue 64, finding 8: with `--idle-minutes` on GKE the keeper beside the head deletes the
    RayCluster when it is idle; the watcher then never reached the head again, and the control
    plane, system pool and NAT stayed until the lease's end. Now a watcher that cannot reach the head
    asks the API server (the stack's kubeconfig, stand-in kubectl) whether the RayCluster is gone and
    takes the rest down (the stack destroyed through the Pulumi CLI stand-in)."""
    from burst.unattended import watcher

    fake = RecordingPulumi()
    handle, _ = gke_up(fake)
    with state.locked():
        state.save(handle.model_copy(update={"idle_minutes": 30.0}))
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "crds.json").write_text('["rayclusters.ray.io"]')
    monkeypatch.setenv("FAKE_KUBE", str(kube))
    monkeypatch.setenv("PATH", f"{Path(__file__).resolve().parents[1] / 'fakes' / 'kube'}:{os.environ['PATH']}")
    looks = []

    def unreachable(h):
        looks.append(time.time())
        if len(looks) > 40:
            raise SystemExit("the watcher never took the cluster down")
        if len(looks) == 3:  # the keeper deletes the RayCluster now (it found the cluster idle for 30 minutes)
            (kube / "keeper-acted").write_text("")
        raise ConnectionError("kubectl port-forward: pod burst-head-xxxxx not found")

    (kube / "objects").mkdir()
    rc = kube / "objects" / "burst_raycluster_burst.json"
    rc.write_text('{"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "burst", "namespace": "burst"}, "spec": {}}')
    def keeper_then_unreachable(h):
        if (kube / "keeper-acted").exists():
            rc.unlink(missing_ok=True)
        return unreachable(h)

    monkeypatch.setattr(watcher, "job_activity", keeper_then_unreachable)
    monkeypatch.setattr(watcher, "WATCH_POLL_S", 0.05)
    with pulumi_command(fake):
        assert watcher.watch("t") == 0
    assert 3 <= len(looks) <= 6  # not while the RayCluster was there; at the first look after it went
    assert fake.commands().count("destroy") == 1 and state.load(ClusterHandle, "t") is None
    log = (home / "managed" / "cluster-t.log").read_text()
    assert "taken down by its watcher: its keeper ended its Ray cluster (no job for its idle time)" in log


def test_a_gke_cluster_whose_head_pod_was_evicted_is_lost_in_the_api_server_s_words_and_its_cluster_gone_too(home, tmp_path, monkeypatch):
    """Issue 86: a controller that cannot reach a GKE head asks the API server through the stack's
    kubeconfig (stand-in kubectl, Pulumi CLI stand-in): a head pod evicted (a spot node reclaimed
    takes its pods) is a loss now, a RayCluster deleted by its keeper too; a running head is not,
    and an API server that does not answer is no verdict."""
    from burst.targets import get

    fake = RecordingPulumi()
    handle, _ = gke_up(fake)
    kube = tmp_path / "kube"
    (kube / "objects").mkdir(parents=True)
    (kube / "crds.json").write_text('["rayclusters.ray.io"]')
    rc = kube / "objects" / "burst_raycluster_burst.json"
    rc.write_text('{"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "burst", "namespace": "burst"}, "spec": {}}')
    monkeypatch.setenv("FAKE_KUBE", str(kube))
    monkeypatch.setenv("PATH", f"{Path(__file__).resolve().parents[1] / 'fakes' / 'kube'}:{os.environ['PATH']}")
    gke = get("gcp")
    with pulumi_command(fake):
        assert not gke.is_gone(handle)
        (kube / "head-failed").write_text("")
        assert gke.is_gone(handle) and gke.stopped_reason(handle) == "pod burst-head-0 Failed (Evicted: The node was low on resource: memory.)"
        (kube / "unreachable").write_text("")
        assert not gke.is_gone(handle)
        (kube / "unreachable").unlink()
        rc.unlink()
        assert gke.stopped_reason(handle) == "its RayCluster in namespace burst is gone"
