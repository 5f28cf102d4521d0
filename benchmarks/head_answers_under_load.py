"""How long does a busy local Ray head fail to answer the controller's look (the figure behind
recovery.loss_grace_seconds)? Polls is_alive every 2 s (the controller's POLL_S, 2 s timeout) while this
machine trains gan3d on the head with 2 workers; prints looks, misses and the longest silence.
"""
import json, os, subprocess, sys, time, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
home = Path(tempfile.mkdtemp()) / "home"; home.mkdir()
env = {**os.environ, "BURST_HOME": str(home)}
def burst(*a, **kw):
    return subprocess.run([sys.executable, "-m", "burst.cli", *a], capture_output=True, text=True, env=env, cwd="/tmp", **kw)
assert burst("up", "--provider", "local", "--name", "g", "--cpus", "2").returncode == 0
os.environ["BURST_HOME"] = str(home)
from burst.home import state
from burst.home.state import ClusterHandle
from burst.runtime.ray_head import is_alive
handle = state.load(ClusterHandle, "g")
train = subprocess.Popen([sys.executable, "-m", "burst.cli", "train", "gan3d", "--cluster", "g", "--epochs", "3", "--steps", "16",
                          "--synthetic", "400", "--val-events", "100", "--batch-per-replica", "8", "--workers", "2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/tmp")
looks, misses, streak, longest, lat = 0, 0, 0.0, 0.0, []
t_start = time.time(); miss_since = None
while train.poll() is None:
    t0 = time.time(); ok = is_alive(handle, timeout=2.0); dt = time.time() - t0
    looks += 1; lat.append(dt)
    if ok:
        if miss_since is not None:
            longest = max(longest, time.time() - miss_since); miss_since = None
    else:
        misses += 1
        miss_since = miss_since or t0
    time.sleep(max(0.0, 2.0 - dt))
if miss_since is not None:
    longest = max(longest, time.time() - miss_since)
lat.sort()
print(json.dumps({"seconds": round(time.time() - t_start, 1), "looks": looks, "missed": misses, "longest_miss_s": round(longest, 1),
                  "answer_s_median": round(lat[len(lat)//2], 3), "answer_s_max": round(lat[-1], 3), "train_rc": train.returncode}))
burst("down", "g")
