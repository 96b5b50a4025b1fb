#!/usr/bin/env bash
# `make test`'s run of the suite: three jobs side by side, so that no core idles while a
# server starts or an image builds.
#   - the engine tier (real servers, one after another), in the foreground;
#   - the CPU tier (unit, deploy, the fuzz tier on the engine double), its output shown after;
#   - the image tier's images, built where podman or docker answers (make image-build-if-engine);
#     `make image-test-if-engine` then runs the containers, once the engine tier is done.
# PYTHON: the interpreter with the project installed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ARTIFACTS=tests/artifacts
mkdir -p "$ARTIFACTS"

SUITE_PART=cpu "$PY" -m pytest tests/unit tests/deploy tests/fuzz \
  --ignore=tests/fuzz/test_real_engine.py > "$ARTIFACTS/cpu-tier.log" 2>&1 &
cpu=$!
make --no-print-directory image-build-if-engine > "$ARTIFACTS/image-build.log" 2>&1 &
images=$!

SUITE_PART=engine "$PY" -m pytest tests/fuzz/test_real_engine.py tests/integration tests/image
engine=$?
wait "$cpu"
cpu_status=$?
wait "$images"
images_status=$?

echo "=== the CPU tier, run beside the engine tier ($ARTIFACTS/cpu-tier.log) ==="
cat "$ARTIFACTS/cpu-tier.log"
echo "=== the image tier's builds, run beside the engine tier (tail of $ARTIFACTS/image-build.log) ==="
grep -E '^\[image' "$ARTIFACTS/image-build.log"
tail -n 5 "$ARTIFACTS/image-build.log"
echo "=== engine tier: exit $engine; CPU tier: exit $cpu_status; image builds: exit $images_status ==="
exit $((engine || cpu_status || images_status))
