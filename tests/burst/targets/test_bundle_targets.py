"""What `--bundle` and `onprem.container` make a Slurm job run (the scripts, checked as written;
tests/test_pack.py runs a real job from a real bundle)."""

import subprocess
import sys
from pathlib import Path

import pytest

from burst import api
from burst.errors import BurstError
from burst.home.state import ClusterHandle
from burst import targets
from burst.pack import check_bundle
from burst.targets.slurm import CONTAINER_PYTHON, job_script

ROOT = Path(__file__).resolve().parents[3]


def fake_bundle(path: Path) -> Path:
    (path / "wheels").mkdir(parents=True)
    for name in ("install.sh", "SHA256SUMS", "requirements.lock"):
        (path / name).write_text("")
    return path


def test_a_bundle_job_installs_once_under_a_lock_then_runs_the_bundles_python(tmp_path):
    bundle = fake_bundle(tmp_path / "b")
    script, python = job_script("c", tmp_path / "cl", "id1", str(tmp_path / "cl" / "storage"), str(bundle), None)
    lines = script.splitlines()
    assert lines[-2] == f"flock {bundle}/.install.lock sh -c '[ -x {bundle}/venv/bin/python ] || {bundle}/install.sh {bundle}/venv'"
    assert lines[-1] == f"exec {bundle}/venv/bin/python -m burst.targets.slurm_job {tmp_path}/cl id1 {tmp_path}/cl/storage 115"
    assert python == f"{bundle}/venv/bin/python"
    # the install line as bash runs it on a node, twice, with a stand-in install.sh that counts its runs
    # (tests/test_pack.py runs the real install.sh, and a real Slurm job from the installed bundle)
    (bundle / "install.sh").write_text('#!/bin/sh\necho x >> "$(dirname "$0")/installs"\nmkdir -p "$1/bin" && printf "#!/bin/sh\\n" > "$1/bin/python" && chmod +x "$1/bin/python"\n')
    (bundle / "install.sh").chmod(0o755)
    for _ in range(2):
        subprocess.run(["bash", "-e", "-c", lines[-2]], check=True, timeout=30)
    assert (bundle / "installs").read_text() == "x\n" and (bundle / "venv" / "bin" / "python").stat().st_mode & 0o111
    handle = ClusterHandle(name="c", provider="slurm", cluster_id="id1", storage_uri="x", outputs={"python": python})
    assert targets.get("slurm").job_runtime(handle).python == python and not targets.get("slurm").job_runtime(handle).runtime_env


def test_a_container_job_runs_ch_run_with_the_cluster_dir_and_storage_bound(tmp_path):
    image = tmp_path / "img"
    image.mkdir()
    script, python = job_script("c", tmp_path / "cl", "id1", "/scratch/s", None, str(image))
    assert script.splitlines()[-1] == (f"exec ch-run -b {tmp_path}/cl -b /scratch/s {image} -- {CONTAINER_PYTHON} "
                                       f"-m burst.targets.slurm_job {tmp_path}/cl id1 /scratch/s 115")
    assert python == CONTAINER_PYTHON
    assert (image / str(tmp_path / "cl").lstrip("/")).is_dir() and (image / "scratch" / "s").is_dir()  # mount points
    (image / "elsewhere").write_text("")  # a file where a mount point must go: mkdir cannot make it
    with pytest.raises(BurstError, match="cannot make the mount point /elsewhere/s in the Charliecloud image"):
        job_script("c", tmp_path / "cl", "id1", "/elsewhere/s", None, str(image))


def test_bundle_flag_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("BURST_HOME", str(tmp_path / "home"))
    with pytest.raises(BurstError, match="no install.sh there; give a directory made by `burst pack`"):
        check_bundle(str(tmp_path))
    with pytest.raises(BurstError, match="--bundle applies to on-prem targets"):
        api.up("local", "x", bundle=str(fake_bundle(tmp_path / "b")))


def test_version():
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "0.1.0"


@pytest.mark.parametrize("args, fragment", [
    (["--extras", "aws"], "unknown extra aws; choose from gcp, azure"),
    (["--python", "three"], "--python wants a version like 3.11, got 'three'"),
])
def test_pack_bad_input_is_one_line_and_leaves_nothing(tmp_path, args, fragment):
    out = tmp_path / "bundle"
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "pack", "--out", str(out), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1 and fragment in errors[0], proc.stderr
    assert not out.exists()


def test_pack_refuses_a_directory_with_files(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = subprocess.run([sys.executable, "-m", "burst.cli", "pack", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "is not empty; give a new directory with --out" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_cross_platform_packs_ask_pip_for_wheels_of_the_target():
    from burst.pack import target_flags

    assert target_flags(None, None) == []
    assert target_flags("3.10", "manylinux2014_x86_64") == ["--python-version", "3.10", "--implementation", "cp", "--abi", "cp310",
                                                             "--platform", "manylinux2014_x86_64", "--only-binary=:all:"]
