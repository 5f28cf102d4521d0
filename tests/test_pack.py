"""`burst pack` and an install that needs no network: a real bundle, installed in a fresh venv
inside a network namespace with no interfaces, then used for real (and by a real Slurm job)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import census, slurm_site

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _no_network_prefix() -> tuple[list[str], str]:
    """`unshare --net` when this machine lets us (root, namespaces allowed), else nothing: install.sh
    installs with --no-index --isolated either way, and the environment's index points nowhere."""
    if shutil.which("unshare") and subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        return ["unshare", "--net"], "network namespace without interfaces"
    return [], "no network namespace here: --no-index with PIP_INDEX_URL pointing nowhere"


NO_NET, HOW = _no_network_prefix()


def clean_env(**extra) -> dict:
    """No pip settings, no source tree on the path: what a fresh login on the site has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PIP_INDEX_URL": "http://127.0.0.1:9/nowhere", "PIP_NO_INDEX": "1", **extra}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "burst-bundle"
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "pack", "--out", str(out), "--json"], capture_output=True, text=True,
                          timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    print(f"bundle: {summary['bytes'] / 1e6:.0f} MB, {summary['wheels']} wheels, built in {summary['seconds']} s")
    yield out


def test_bundle_is_pinned_hashed_and_checksummed(bundle):
    lock = (bundle / "requirements.lock").read_text().splitlines()[1:]
    wheels = sorted(bundle.glob("wheels/*.whl"))
    assert len(lock) == len(wheels) > 50 and all("==" in line and "--hash=sha256:" in line for line in lock)
    names = {line.split("==")[0] for line in lock}
    assert {"burst", "tensorflow", "ray", "h5py", "pydantic"} <= names
    sums = dict(reversed(line.split("  ", 1)) for line in (bundle / "SHA256SUMS").read_text().splitlines())
    assert set(sums) >= {"install.sh", "requirements.lock", "policies/default.yaml", *(f"wheels/{w.name}" for w in wheels)}


def test_install_and_run_with_no_network(bundle, tmp_path):
    """install.sh with no network, and the installed burst answers from the venv. (Training from
    this installation: the Charliecloud test below, a whole `burst run` on a Slurm allocation; a
    second training run here cost the suite 12 to 15 CPU-s and proved the same.)"""
    print(f"no network: {HOW}")
    env = clean_env(BURST_HOME=str(tmp_path / "home"))
    venv = bundle / "venv"  # where `burst up --bundle` expects it (the Slurm test below uses it)
    started = time.perf_counter()
    install = subprocess.run([*NO_NET, str(bundle / "install.sh")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200)
    print(f"install.sh with no network: {time.perf_counter() - started:.0f} s")
    assert install.returncode == 0, install.stderr[-3000:]
    assert install.stdout.strip().endswith(f"installed in {venv}")
    run = lambda *args, timeout=600: subprocess.run([*NO_NET, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)  # noqa: E731
    where = run(str(venv / "bin" / "python"), "-c", "import burst, workloads; print(burst.__file__); print(workloads.__file__)")
    assert where.returncode == 0 and all(line.startswith(str(venv)) for line in where.stdout.split()), where.stdout + where.stderr
    assert run(str(venv / "bin" / "burst"), "--version").stdout.strip() == "0.1.0"
    plan = run(str(venv / "bin" / "burst"), "plan", "--json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads(plan.stdout)["choice"]["provider"]


def test_a_tampered_wheel_stops_install_sh_with_one_line_naming_it(bundle, tmp_path):
    victim = min(bundle.glob("wheels/*.whl"), key=lambda p: p.stat().st_size)
    original = victim.read_bytes()
    try:
        victim.write_bytes(original + b"\0")
        proc = subprocess.run([*NO_NET, str(bundle / "install.sh"), str(tmp_path / "venv")], capture_output=True, text=True,
                              env=clean_env(), timeout=300)
    finally:
        victim.write_bytes(original)
    print(f"tampered {victim.name}: exit {proc.returncode}: {proc.stderr.strip()}")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"install.sh: wheels/{victim.name} does not match SHA256SUMS (changed, truncated or missing): copy the bundle again"]
    assert not (tmp_path / "venv").exists()  # nothing was installed


def image_from_this_root(image: Path, venv: Path) -> Path:
    """An image directory assembled from this machine's root file system (hard links, seconds),
    with the bundle's installation at /opt/burst/venv, as docker/Dockerfile.charliecloud makes it."""
    image.mkdir()
    subprocess.run(["cp", "-al", "/usr", str(image / "usr")], check=True)
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        if (Path("/") / link).is_symlink():
            (image / link).symlink_to(target)
    subprocess.run(["cp", "-a", "/etc", str(image / "etc")], check=True)
    for d in ("proc", "sys", "dev", "tmp", "home", "root", "opt/burst", "var/tmp", "run"):
        (image / d).mkdir(parents=True, exist_ok=True)
    base = Path(os.path.realpath(venv / "bin" / "python")).parents[1]  # the interpreter the venv was made from
    if not str(base).startswith("/usr/"):
        (image / base.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(base), str(image / base.relative_to("/"))], check=True)
    subprocess.run(["cp", "-al", str(venv), str(image / "opt" / "burst" / "venv")], check=True)
    return image


@slurm_site.needs(slurm_site.charliecloud_missing(), slurm_site.missing())
def test_a_slurm_allocation_runs_burst_from_the_bundle_inside_a_charliecloud_image_end_to_end_and_leaves_nothing(bundle, tmp_path):
    """`burst run --provider slurm` whole, from the air-gapped install: the allocation starts a Ray
    head inside a Charliecloud image holding the bundle's installation (as
    docker/Dockerfile.charliecloud makes it), the run trains, validates and reports, and the
    allocation, the head's Ray directory and every process go with it. (The Slurm target's tests in
    tests/burst/targets/test_slurm.py train on allocations of the source tree's installation; the
    `--bundle` job script, which installs the bundle on the node instead, is run in
    tests/burst/targets/test_bundle_targets.py.)"""
    from burst.runtime import ray_head

    venv = bundle / "venv"
    if not (venv / "bin" / "python").exists():  # this test alone: install the bundle first
        subprocess.run([*NO_NET, str(bundle / "install.sh")], check=True, capture_output=True, env=clean_env(), timeout=1200)
    image = image_from_this_root(tmp_path / "image", venv)
    site = slurm_site.start()
    before = census.snapshot()
    ray_dirs = set(ray_head.runtime_root().glob("*"))
    try:
        home = tmp_path / "home"
        env = {**site.env, "BURST_HOME": str(home)}
        env.pop("USER", None)  # the job script sets it for ch-run
        policy = site.policy(tmp_path / "slurm.yaml", container=str(image))
        proc = subprocess.run([sys.executable, "-m", "burst.cli", "run", "gan3d", "--provider", "slurm", "--name", "boxed",
                               "--policy", str(policy), "--hours", "1", "--epochs", "2", "--steps", "2", "--synthetic", "200",
                               "--val-events", "60", "--batch-per-replica", "8"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Slurm job" in proc.stderr and "cluster boxed stopped" in " ".join(proc.stderr.split())
        (run_dir,) = list((tmp_path / "burst-runs").iterdir())
        assert [h["epoch"] for h in json.loads((run_dir / "history.json").read_text())] == [1, 2]
        assert (run_dir / "report" / "report.html").exists()
        provenance = json.loads((run_dir / "provenance.json").read_text())
        assert provenance["machine"]["python"] == "/opt/burst/venv/bin/python"  # the job ran the bundle's install, in the image
        assert provenance["target"]["provider"] == "slurm" and provenance["timings"]["submit_to_first_step_s"] > 0
        assert site.jobs() == []  # the allocation is gone
        assert not (home / "clusters" / "boxed.json").exists()
    finally:
        slurm_site.stop(site)
    census.assert_none_left(before)
    assert set(ray_head.runtime_root().glob("*")) <= ray_dirs  # the head's Ray directory went with the job
