#!/usr/bin/env bash
# The GPU benchmark on a host that has no package registry and is reached only by short
# remote commands (each returns within minutes; the run goes on in the background between
# them). vLLM's CUDA build and the extra wheels arrive as an archive in parts (see setup.sh),
# one part a command, in the ignored folder .gpu-carry/<part>/ of the checkout sent along.
#
#   command 1, with .gpu-carry/a:  bash bench/gpu/session.sh part
#   command 2, with .gpu-carry/b:  bash bench/gpu/session.sh start SECONDS [run.py options]
#     or, the realistic workloads:  bash bench/gpu/session.sh workloads SECONDS [bench.realistic options]
#     (BENCH_SHAPES="1b 8b" before it names the shapes to make; a base-tree.tar among the
#     parts, a checkout to compare with, is unpacked to /tmp/base: --base-tree /tmp/base)
#   then until it says "done":     bash bench/gpu/session.sh poll SECONDS
#   (poll exits 3 at once on a host without a run, e.g. a fresh one: start again)
#   The files under /tmp live only as long as the host: make the commands one after another.
set -uo pipefail
OUT=${OUT:-/tmp/out}
RUN=/tmp/gpu-out

bring_back() {
  mkdir -p "$OUT"
  cp "$RUN"/results.jsonl "$RUN"/table.md "$OUT"/ 2>/dev/null
  tail -c 4000 "$RUN"/run.log > "$OUT"/run-tail.log 2>/dev/null
  if [ -e "$RUN"/done ]; then
    tar -C "$RUN" -czf "$OUT"/profiles-and-logs.tgz profiles machine.txt $(cd "$RUN" && ls -d *.log logs) 2>/dev/null
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
  start|workloads)
    mode=$1 seconds=$2; shift 2
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
    if [ -e /tmp/bundle/base-tree.tar ]; then mkdir -p /tmp/base && tar -xf /tmp/bundle/base-tree.tar -C /tmp/base; fi
    if [ "$mode" = workloads ]; then command="python3 -m bench.realistic"; else command="python3 bench/gpu/run.py"; fi
    setsid bash -c "$command --models /tmp/models --out $RUN $* > $RUN/run.log 2>&1; touch $RUN/done" \
      < /dev/null > /dev/null 2>&1 &
    wait_for_run "$seconds"
    ;;
  poll)
    # A fresh machine (the last one was given back) has no run: say so at once.
    [ -e "$RUN"/run.log ] || { echo "no run on this machine: it is a fresh one, start again"; exit 3; }
    wait_for_run "$2"
    ;;
esac
