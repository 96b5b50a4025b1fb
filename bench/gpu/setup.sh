#!/usr/bin/env bash
# On a GPU host without a package registry: vLLM's CUDA build from the archive parts
# gathered in /tmp/bundle (vllm-site.tar.xz.part*, its site-packages for the host's torch),
# the wheels in /tmp/bundle/extra-wheels (grpcio-health-checking at the host's grpcio
# version and, for run.py --profile, py-spy), and the random-weight models with SmolLM2's
# tokenizer (its files in /tmp/bundle/tokenizer).
# BENCH_SHAPES (default "tiny 1b"): the model shapes to make. Then: source bench/gpu/env.sh.
set -euo pipefail
cat /tmp/bundle/vllm-site.tar.xz.part* | python3 -c "import sys,tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site', filter='tar')"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/bundle/extra-wheels/*.whl
source "$(dirname "$0")/env.sh"
mkdir -p /tmp/models
python3 "$(dirname "$0")/mkmodels.py" --like /tmp/bundle/tokenizer --out /tmp/models --shapes ${BENCH_SHAPES:-tiny 1b}
