#!/usr/bin/env bash
# Runs a benchmark client that `make clients` installed into .cache/clients, with what it needs:
#  - perf_analyzer on the PATH and the CUDA runtime library it links (genai-perf runs it; no
#    GPU is needed);
#  - a model prepared in this checkout (.cache/models/NAME, such as smollm2) as the tokenizer,
#    when the command names that model and no tokenizer (the tools' defaults are hub ids);
#  - for AIPerf given a tokenizer folder, no HF_HUB_OFFLINE (AIPerf reads it as "the hub's
#    cache only" and refuses a folder).
# `make clients` links .cache/clients/launch/<tool> to this script, one per tool:
#
#   .cache/clients/launch/genai-perf profile -m smollm2 --endpoint-type kserve ...
#   bench/clients.sh genai-perf profile ...        (the same, naming the tool)
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
clients=$root/.cache/clients
perf_analyzer=$clients/perf-analyzer

tool=$(basename "$0")
if [ "$tool" = clients.sh ]; then
  tool=${1:?usage: bench/clients.sh aiperf|genai-perf|guidellm|perf_analyzer [ARGS...]}
  shift
fi
case "$tool" in
  perf_analyzer) program=$perf_analyzer/bin/perf_analyzer ;;
  aiperf | genai-perf | guidellm) program=$clients/bin/$tool ;;
  *) echo "bench/clients.sh: unknown tool '$tool' (aiperf, genai-perf, guidellm, perf_analyzer)" >&2; exit 2 ;;
esac
if [ ! -x "$program" ]; then
  echo "$tool is not installed: run 'make clients'" >&2
  exit 127
fi

# The model the command names (-m, --model, guidellm's --backend ...,model=NAME) and its tokenizer.
model="" tokenizer="" previous=""
for arg in "$@"; do
  case "$previous" in
    -m | --model) model=$arg ;;
    --tokenizer) tokenizer=$arg ;;
    --backend) if [[ $arg =~ (^|,)model=([^,]+) ]]; then model=${BASH_REMATCH[2]}; fi ;;
  esac
  case "$arg" in
    --model=*) model=${arg#--model=} ;;
    --tokenizer=*) tokenizer=${arg#--tokenizer=} ;;
  esac
  previous=$arg
done
args=("$@")
folder=$root/.cache/models/$model
if [ "$tool" != perf_analyzer ] && [ -z "$tokenizer" ] && [ -n "$model" ] && [ -d "$folder" ]; then
  tokenizer=$folder
  if [ "$tool" = guidellm ]; then
    args+=(--tokenizer "kind=huggingface_auto,model=$folder")
  else
    args+=(--tokenizer "$folder")
  fi
fi
if [ "$tool" = aiperf ] && [ -d "$tokenizer" ]; then
  unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE
fi

export PATH=$perf_analyzer/bin:$clients/bin:$PATH
export LD_LIBRARY_PATH=$perf_analyzer/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$program" "${args[@]}"
