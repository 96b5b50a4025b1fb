#!/usr/bin/env bash
# Our server with 2 frontend processes on the tiny shape: one request each way, then stop.
set -uo pipefail
source "$(dirname "$0")/env.sh"
export PYTHONPATH=$PWD:$PYTHONPATH
python3 - <<'PY'
import json, os, subprocess, sys, time, urllib.request
sys.path.insert(0, "bench/gpu")
from pathlib import Path
from servers import ENGINE_ARGS, repository
repo = repository(Path("/tmp/models"), "tiny", "smoke", ENGINE_ARGS)
env = dict(os.environ, FRONTEND_PROCESSES="2")
log = open(os.environ.get("OUT", "/tmp") + "/smoke.log", "w")
p = subprocess.Popen([sys.executable, "-m", "app", "--model-repository", str(repo), "--port", "8000"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
t = time.time()
while time.time() - t < 400:
    try:
        if urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=2).status == 200: break
    except OSError: time.sleep(1)
print("ready after", round(time.time() - t), "s", flush=True)
for path, body in [("/v2/models/tiny/generate", {"text_input": "hi", "parameters": {"max_tokens": 8, "ignore_eos": True}}),
                   ("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 8})]:
    req = urllib.request.Request("http://127.0.0.1:8000" + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try: print(path, urllib.request.urlopen(req, timeout=60).read()[:300], flush=True)
    except Exception as e: print(path, "failed", e, getattr(e, "read", lambda: b"")()[:500], flush=True)
m = urllib.request.urlopen("http://127.0.0.1:8000/metrics", timeout=30).read().decode()
print([l for l in m.splitlines() if l.startswith(("nv_inference_request_success", "vllm:generation_tokens_total"))])
os.killpg(p.pid, 15); p.wait(60)
PY
tail -5 ${OUT:-/tmp}/smoke.log
