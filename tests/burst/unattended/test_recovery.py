"""Where a managed run moves when its cluster is lost: the plan again, under the policy's
``recovery`` keys, without what failed (pure placement: no cluster is started)."""

import pytest

from burst import controller
from burst.unattended.managed import Attempt, ManagedRun


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def moved(tmp_path, policy_text: str, lost: list[Attempt], avoid: list[str]) -> dict:
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    m = ManagedRun(run_id="gan3d-1", request={}, cluster="c", placement={"provider": "gcp", "gpus": 8}, policy=str(policy),
                   attempts=[*lost, Attempt(number=len(lost) + 1, cluster="c-2")], avoid=avoid)
    ask, _ = controller.Controller(m).moved_request()
    return ask.flags()


def lost_spot(region: str) -> Attempt:
    return Attempt(number=1, cluster="c", provider="gcp", region=region, preemptible=True, ended=1.0, how="lost: preempted")


def test_a_lost_spot_region_is_avoided_and_the_next_cluster_is_on_demand(home, tmp_path):
    first = moved(tmp_path, "providers: [gcp, azure]\npreemptible: prefer\n", [], [])  # what the plan takes with nothing lost
    assert first["provider"] in ("gcp", "azure") and first["preemptible"] is True
    flags = moved(tmp_path, "providers: [gcp, azure]\npreemptible: prefer\n", [lost_spot(first["region"])], [f"{first['provider']}:{first['region']}"])
    assert (flags["provider"], flags["region"]) != (first["provider"], first["region"])
    assert flags["preemptible"] is False  # recovery.fallback_on_demand_after: 1 (the default)


def test_without_fallback_the_move_stays_preemptible_and_allow_providers_bounds_it(home, tmp_path):
    text = "providers: [gcp, azure]\npreemptible: prefer\nrecovery: {fallback_on_demand_after: null, allow_providers: [azure]}\n"
    flags = moved(tmp_path, text, [lost_spot("us-central1")], ["gcp:us-central1"])
    assert flags["provider"] == "azure" and flags["preemptible"] is True


def test_same_first_starts_the_lost_target_once_more_then_moves_on(home, tmp_path):
    """recovery.strategy: same_first (SkyPilot's FAILOVER): the region just lost is started again,
    on-demand after the default fallback, before the run is moved; lost there twice, it moves."""
    text = "providers: [gcp, azure]\npreemptible: prefer\nrecovery: {strategy: same_first}\n"
    first = moved(tmp_path, text, [], [])
    where = f"{first['provider']}:{first['region']}"
    once = Attempt(number=1, cluster="c", provider=first["provider"], region=first["region"], preemptible=True, ended=1.0, how="lost: preempted")
    again = moved(tmp_path, text, [once], [where])
    assert (again["provider"], again["region"], again["preemptible"]) == (first["provider"], first["region"], False)
    twice = once.model_copy(update={"number": 2, "cluster": "c-2", "preemptible": False})
    elsewhere = moved(tmp_path, text, [once, twice], [where])
    assert (elsewhere["provider"], elsewhere["region"]) != (first["provider"], first["region"])
    # a target that could not even start (a stock-out) is not tried again, whatever the strategy
    stocked_out = once.model_copy(update={"how": "could not start: ZONE_RESOURCE_POOL_EXHAUSTED"})
    other = moved(tmp_path, text, [stocked_out], [where])
    assert (other["provider"], other["region"]) != (first["provider"], first["region"])
    # nor is a provider recovery does not allow
    elsewhere_only = text.replace("{strategy: same_first}", "{strategy: same_first, allow_providers: [%s]}"
                                  % ("azure" if first["provider"] == "gcp" else "gcp"))
    assert moved(tmp_path, elsewhere_only, [once], [where])["provider"] != first["provider"]


def test_a_site_that_was_lost_leaves_this_machine(home, tmp_path):
    text = ("providers: [local, slurm]\nmax_slowdown: 1000\nonprem: {name: s, scheduler: slurm, accelerator: V100, gpus: 1, "
            "usd_per_gpu_hour: 0.5}\n")
    gone = Attempt(number=1, cluster="c", provider="slurm", region="s", ended=1.0, how="lost: Slurm job 3 CANCELLED")
    policy = tmp_path / "site.yaml"
    policy.write_text(text)
    m = ManagedRun(run_id="gan3d-2", request={}, cluster="c", placement={"provider": "slurm"}, policy=str(policy),
                   attempts=[gone, Attempt(number=2, cluster="c-2")], avoid=["slurm"])
    ask, _ = controller.Controller(m).moved_request()
    assert ask.flags() == {"provider": "local"}


def test_nothing_left_to_move_to_is_one_line(home, tmp_path):
    from burst.errors import BurstError

    with pytest.raises(BurstError, match="no feasible target"):
        moved(tmp_path, "providers: [gcp]\nregions: [us-central1]\npreemptible: never\n",
              [Attempt(number=1, cluster="c", provider="gcp", region="us-central1", ended=1.0, how="lost: stock-out")], ["gcp:us-central1"])


def test_the_policy_checkpoint_interval_applies_unless_the_flag_sets_one(tmp_path):
    from burst import api
    from burst.placement import policy as policy_mod

    path = tmp_path / "p.yaml"
    path.write_text("checkpoint_every_steps: 50\n")
    pol = policy_mod.load(path)
    assert api.with_policy_settings(api.TrainRequest.of(), pol).checkpoint_every_steps == 50
    assert api.with_policy_settings(api.TrainRequest.of(checkpoint_every_steps=7), pol).checkpoint_every_steps == 7
    assert api.with_policy_settings(api.TrainRequest.of(), policy_mod.load(None)).checkpoint_every_steps is None


def test_a_move_is_planned_for_the_run_s_own_workload(home, tmp_path):
    """`burst train calo --managed` records no workload among its placement flags: the next cluster
    is still planned (and later sized) with calo's profile, not the default workload's."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("providers: [gcp, azure]\npreemptible: prefer\n")
    m = ManagedRun(run_id="calo-1", request={"workload": "calo"}, cluster="c", placement={"provider": "gcp"}, policy=str(policy),
                   attempts=[lost_spot("us-central1"), Attempt(number=2, cluster="c-2")], avoid=["gcp:us-central1"])
    ask, _ = controller.Controller(m).moved_request()
    assert ask.workload == "calo" and not ask.accelerator.lower().startswith("tpu")


# How an attempt ended, from its job's final status, whether it stopped where asked (and why) and
# whether the budget guard or the lease asked it to stop.
_NOTICE = type("Stopped", (), {"on_notice": True})()
_ASKED = type("Stopped", (), {"on_notice": False})()


@pytest.mark.parametrize("status, stopped, budget, lease, how", [
    ("SUCCEEDED", None, False, False, "finished"),
    ("SUCCEEDED", None, True, False, "finished"),    # the budget's stop came after the last step: the results are collected
    ("SUCCEEDED", None, False, True, "finished"),    # so does a lease's
    ("SUCCEEDED", _ASKED, True, False, "budget"),    # it stopped where the budget guard asked
    ("SUCCEEDED", _ASKED, False, True, "lease"),
    ("SUCCEEDED", _NOTICE, False, False, "notice"),  # its cluster gave notice: the run moves
    ("SUCCEEDED", _NOTICE, True, False, "budget"),   # a budget stop is not a move
    ("FAILED", None, True, False, "budget"),
    ("FAILED", None, False, False, "failed"),
])
def test_a_job_that_finished_wins_over_a_late_stop(status, stopped, budget, lease, how):
    assert controller.ending(status, stopped, budget=budget, lease=lease) == how


def test_every_strategy_a_policy_may_name_is_one_named_strategy():
    """`recovery.strategy` in a policy is validated against a list of names; each is a strategy
    class of `unattended/recovery.py`, and there is no strategy a policy cannot name."""
    import typing

    from burst.placement.policy import Recovery
    from burst.unattended import recovery

    names = set(typing.get_args(Recovery.model_fields["strategy"].annotation))
    assert names == set(recovery.STRATEGIES) and all(recovery.strategy(n).name == n for n in names)


def test_an_attempt_whose_controller_died_before_its_cluster_was_recorded_starts_again_as_itself(home, tmp_path):
    """A controller killed between "attempt 2: starting cluster c-2" and the cluster's record (written
    before anything of it starts): the next controller finds no record and nothing made. The attempt
    starts again under its own number and name, not as a lost attempt 2 and a third one."""
    from burst.home import state
    from burst.home.state import RunRecord
    from burst.unattended.managed import load, moves, save

    state.save(RunRecord(run_id="gan3d-1", workload="gan3d", cluster="c", provider="slurm", state="RUNNING", managed=True))
    m = ManagedRun(run_id="gan3d-1", request={}, cluster="c", placement={"provider": "gcp", "gpus": 8},
                   attempts=[Attempt(number=1, cluster="c", provider="slurm", ended=1.0, how="lost: cancelled"),
                             Attempt(number=2, cluster="c-2")])
    save(m)
    controller.Controller(m).follow_attempt(m.attempts[-1])
    kept = load("gan3d-1")
    assert [(a.number, a.cluster, a.ended is not None) for a in kept.attempts] == [(1, "c", True)]  # attempt 2 is next again
    assert moves("gan3d-1")[-1].endswith("attempt 2: its controller stopped before cluster c-2 was made; starting it again")
    # a cluster that had been made (its id noted) and is gone since is lost, as before
    m.attempts.append(Attempt(number=2, cluster="c-2", cluster_id="c-2-abc", cluster_created=2.0, submitted=3.0))
    save(m)
    controller.Controller(m).follow_attempt(m.attempts[-1])
    assert load("gan3d-1").attempts[-1].how.startswith("lost") and "record is gone" in load("gan3d-1").attempts[-1].how
