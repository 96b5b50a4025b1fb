#!/usr/bin/env bash
# On the GPU host (see GPU-RUN.md): vLLM's CUDA build from the bundle parts gathered in
# /tmp/bundle, our extra wheels, and the random-weight models with SmolLM2's tokenizer
# (its files in /tmp/bundle/tokenizer). extra-wheels must also hold grpcio-health-checking
# and, for run.py --profile, py-spy (`pip download --no-deps grpcio-health-checking py-spy`),
# which the bundle script does not add.
# Then: source bench/gpu/env.sh.
set -euo pipefail
cat /tmp/bundle/vllm-site.tar.xz.part* | python3 -c "import sys,tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site', filter='tar')"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/bundle/extra-wheels/*.whl
source "$(dirname "$0")/env.sh"
mkdir -p /tmp/models
python3 "$(dirname "$0")/mkmodels.py" /tmp/bundle/tokenizer/config.json /tmp/models
for shape in tiny 1b; do
  cp /tmp/bundle/tokenizer/{tokenizer.json,tokenizer_config.json,generation_config.json} /tmp/models/$shape/
done
