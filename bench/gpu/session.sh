#!/usr/bin/env bash
# The GPU run as back-to-back device calls on one warm machine (GPU-RUN.md): the bundle parts
# travel one a call in an ignored folder, the run goes on under setsid between calls, and
# each call brings back what is written so far (results.jsonl, table.md, the log's tail).
#
#   call 1, carry .gpu-carry/a:  bash bench/gpu/session.sh part
#   call 2, carry .gpu-carry/b:  bash bench/gpu/session.sh start SECONDS [run.py options]
#   then until it says "done":   bash bench/gpu/session.sh poll SECONDS
#   (poll exits 3 at once on a machine without a run: the warm one was given back)
#   Make each call at once after the last returns: the machine goes back 30 s after a command ends.
set -uo pipefail
OUT=${OUT:-/tmp/out}
RUN=/tmp/gpu-out

bring_back() {
  mkdir -p "$OUT"
  cp "$RUN"/results.jsonl "$RUN"/table.md "$OUT"/ 2>/dev/null
  tail -c 4000 "$RUN"/run.log > "$OUT"/run-tail.log 2>/dev/null
  if [ -e "$RUN"/done ]; then
    tar -C "$RUN" -czf "$OUT"/profiles-and-logs.tgz profiles machine.txt $(cd "$RUN" && ls *.log) 2>/dev/null
    echo done
  fi
  tail -c 1500 "$RUN"/run.log
}

wait_for_run() {
  local until=$((SECONDS + $1))
  while [ $SECONDS -lt "$until" ] && [ ! -e "$RUN"/done ]; do sleep 5; done
  bring_back
}

case "$1" in
  part)
    mkdir -p /tmp/bundle && cp -r .gpu-carry/*/* /tmp/bundle/
    ls /tmp/bundle
    ;;
  start)
    seconds=$2; shift 2
    cp -r .gpu-carry/*/* /tmp/bundle/
    rm -rf /tmp/repo "$RUN" && mkdir -p /tmp/repo "$RUN"
    tar --exclude=./.gpu-carry --exclude=./.git -cf - . | tar -xf - -C /tmp/repo
    cd /tmp/repo
    { nproc; lscpu; for cpu in /sys/devices/system/cpu/cpu[0-9]*; do
        echo "$(basename "$cpu") siblings $(cat "$cpu"/topology/thread_siblings_list)"; done
      nvidia-smi; } > "$RUN"/machine.txt 2>&1
    grep -E "^CPU\(s\)|Thread|Core|Model name" "$RUN"/machine.txt
    bash bench/gpu/setup.sh > "$RUN"/setup.log 2>&1 || { tail -20 "$RUN"/setup.log; exit 1; }
    source bench/gpu/env.sh
    python3 -c "import vllm; print('vllm', vllm.__version__)"
    setsid bash -c "python3 bench/gpu/run.py --models /tmp/models --out $RUN $* > $RUN/run.log 2>&1; touch $RUN/done" \
      < /dev/null > /dev/null 2>&1 &
    wait_for_run "$seconds"
    ;;
  poll)
    # A fresh machine (the last one was given back) has no run: say so at once.
    [ -e "$RUN"/run.log ] || { echo "no run on this machine: it is a fresh one, start again"; exit 3; }
    wait_for_run "$2"
    ;;
esac
