#!/usr/bin/env bash
# `make test`'s run of the suite: four jobs side by side, so that no core idles while a
# server starts or an image builds.
#   - the engine tier in two halves (real servers, one after another in each half):
#     the servers-of-their-own half (RESTARTING_FILES: engine kills, restarts, reloads, other
#     repositories; none uses the session's shared servers) in the background, and the rest
#     (the session server's tests, the fuzz tier's real-engine phase) in the foreground;
#     each half's engines compute on a core of their own (VLLM_CPU_OMP_THREADS_BIND);
#   - the CPU tier (unit, deploy, the fuzz tier on the engine double), its output shown after;
#   - the image tier's images, built where podman or docker answers (make image-build-if-engine);
#     `make image-test-if-engine` then runs the containers, once the engine tier is done.
# PYTHON: the interpreter with the project installed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ARTIFACTS=tests/artifacts
mkdir -p "$ARTIFACTS"

RESTARTING_FILES=(
  tests/integration/test_migration_real_engine.py
  tests/integration/test_self_healing.py
  tests/integration/test_load_override_real_engine.py
  tests/integration/test_tritonserver_real_engine.py
  tests/integration/test_cache_aware_real_engine.py
  tests/integration/test_repository_real_engine.py
  tests/integration/test_openai_repository_real_engine.py
  tests/integration/test_stop_bound_real_engine.py
  tests/integration/test_poll_real_engine.py
)
CORES=$(nproc)
if [ "$CORES" -ge 2 ]; then
  FIRST_HALF_CORE=(env VLLM_CPU_OMP_THREADS_BIND=0)
  SECOND_HALF_CORE=(env VLLM_CPU_OMP_THREADS_BIND=$((CORES - 1)))
else
  FIRST_HALF_CORE=(env)
  SECOND_HALF_CORE=(env)
fi

SUITE_PART=cpu "$PY" -m pytest tests/unit tests/deploy tests/fuzz \
  --ignore=tests/fuzz/test_real_engine.py > "$ARTIFACTS/cpu-tier.log" 2>&1 &
cpu=$!
make --no-print-directory image-build-if-engine > "$ARTIFACTS/image-build.log" 2>&1 &
images=$!
SUITE_PART=engine-restarting "${SECOND_HALF_CORE[@]}" "$PY" -m pytest "${RESTARTING_FILES[@]}" \
  > "$ARTIFACTS/engine-restarting.log" 2>&1 &
restarting=$!

SUITE_PART=engine "${FIRST_HALF_CORE[@]}" "$PY" -m pytest tests/fuzz/test_real_engine.py \
  tests/integration tests/image "${RESTARTING_FILES[@]/#/--ignore=}" 2>&1 | tee "$ARTIFACTS/engine.log"
engine=${PIPESTATUS[0]}
wait "$restarting"
restarting_status=$?
wait "$cpu"
cpu_status=$?
wait "$images"
images_status=$?

echo "=== the engine tier's servers-of-their-own half, run beside ($ARTIFACTS/engine-restarting.log) ==="
cat "$ARTIFACTS/engine-restarting.log"
echo "=== the CPU tier, run beside the engine tier ($ARTIFACTS/cpu-tier.log) ==="
cat "$ARTIFACTS/cpu-tier.log"
echo "=== the image tier's builds, run beside the engine tier (tail of $ARTIFACTS/image-build.log) ==="
grep -E '^\[image' "$ARTIFACTS/image-build.log"
tail -n 5 "$ARTIFACTS/image-build.log"
echo "=== what failed, in every job ==="
grep -hE '^(FAILED|ERROR) ' "$ARTIFACTS/engine.log" "$ARTIFACTS/engine-restarting.log" \
  "$ARTIFACTS/cpu-tier.log" || echo "nothing"
echo "=== engine tier: exit $engine and $restarting_status; CPU tier: exit $cpu_status; image builds: exit $images_status ==="
exit $((engine || restarting_status || cpu_status || images_status))
