#!/usr/bin/env bash
# `make test`'s run of the suite: four jobs side by side, so that no core idles while a
# server starts or an image builds.
#   - the engine tier in two halves, each on a core of its own (VLLM_CPU_OMP_THREADS_BIND):
#     in the foreground, the session server's tests (and the browser's, the image tier's);
#     in the background, the limited server's (LIMITED_FILES, one pytest run, so that its
#     server is gone before the next) and then the files whose servers are all their own
#     (RESTARTING_FILES: engine kills, restarts, reloads, other repositories), the modules
#     that run several engines at once last. Such modules hold a lock (the `several_engines`
#     fixture), so that two of them never run at once (memory);
#   - the CPU tier (unit, deploy, the fuzz tier on the engine double), its output shown after;
#   - the image tier's images, built where podman or docker answers (make image-build-if-engine);
#     the background half then runs the containers (make image-test-if-engine) once they are
#     built, beside the foreground half's last files.
# PYTHON: the interpreter with the project installed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ARTIFACTS=tests/artifacts
mkdir -p "$ARTIFACTS"

LIMITED_FILES=(
  tests/fuzz/test_real_engine.py
  tests/integration/test_default_max_tokens_real_engine.py
  tests/integration/test_limits_real_engine.py
  tests/integration/test_openai_limits_real_engine.py
)
RESTARTING_FILES=(
  tests/integration/test_migration_real_engine.py
  tests/integration/test_load_override_real_engine.py
  tests/integration/test_tritonserver_real_engine.py
  tests/integration/test_stop_bound_real_engine.py
  tests/integration/test_poll_real_engine.py
  tests/integration/test_self_healing.py
  tests/integration/test_cache_aware_real_engine.py
  tests/integration/test_repository_real_engine.py
  tests/integration/test_openai_repository_real_engine.py
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
BUILT="$ARTIFACTS/image-build.status"
rm -f "$BUILT"
{
  make --no-print-directory image-build-if-engine > "$ARTIFACTS/image-build.log" 2>&1
  echo $? > "$BUILT"
} &
images=$!
{
  SUITE_PART=engine-limited "${SECOND_HALF_CORE[@]}" "$PY" -m pytest "${LIMITED_FILES[@]}"
  limited_status=$?
  SUITE_PART=engine-restarting "${SECOND_HALF_CORE[@]}" "$PY" -m pytest "${RESTARTING_FILES[@]}"
  restarting_status=$?
  until [ -e "$BUILT" ]; do sleep 5; done
  make --no-print-directory image-test-if-engine IMAGE_CACHE= > "$ARTIFACTS/image-test.log" 2>&1
  exit $((limited_status || restarting_status || $?))
} > "$ARTIFACTS/engine-background.log" 2>&1 &
background=$!

SUITE_PART=engine "${FIRST_HALF_CORE[@]}" "$PY" -m pytest tests/integration tests/image \
  "${LIMITED_FILES[@]/#/--ignore=}" "${RESTARTING_FILES[@]/#/--ignore=}" 2>&1 |
  tee "$ARTIFACTS/engine.log"
engine=${PIPESTATUS[0]}
wait "$background"
background_status=$?
wait "$cpu"
cpu_status=$?
wait "$images"
images_status=$(cat "$BUILT")

echo "=== the engine tier's other half, run beside ($ARTIFACTS/engine-background.log) ==="
cat "$ARTIFACTS/engine-background.log"
echo "=== the CPU tier, run beside the engine tier ($ARTIFACTS/cpu-tier.log) ==="
cat "$ARTIFACTS/cpu-tier.log"
echo "=== the image tier's builds, run beside the engine tier (tail of $ARTIFACTS/image-build.log) ==="
grep -E '^\[image' "$ARTIFACTS/image-build.log"
tail -n 5 "$ARTIFACTS/image-build.log"
echo "=== the image tier, run after the background half ($ARTIFACTS/image-test.log) ==="
cat "$ARTIFACTS/image-test.log"
echo "=== what failed, in every job ==="
grep -hE '^(FAILED|ERROR) ' "$ARTIFACTS/engine.log" "$ARTIFACTS/engine-background.log" \
  "$ARTIFACTS/cpu-tier.log" "$ARTIFACTS/image-test.log" || echo "nothing"
echo "=== engine tier: exit $engine and $background_status (with the image tier); CPU tier: exit $cpu_status; image builds: exit $images_status ==="
exit $((engine || background_status || cpu_status || images_status))
