# The environment of every command on such a GPU host (setup.sh): the unpacked vLLM, no flashinfer.
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_CACHE_ROOT=/tmp/vllm-cache
export PATH=/tmp/site/bin:$PATH  # py-spy (for --profile), when extra-wheels holds it
