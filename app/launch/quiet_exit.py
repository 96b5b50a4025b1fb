"""The interpreter's exit after a server that froze its heap (gc.freeze, FREEZE_GC_HEAP): the
frozen objects are never collected, so nanobind (the bindings of OpenAI's Triton compiler,
which vLLM imports) reports each of its objects still alive as a leak, about 30 lines on
standard error. They are not leaks: the process is ending. Once the server has stopped, its
last exit step sends standard error to /dev/null; everything the server and vLLM write while
stopping (atexit handlers included) is written before."""

from __future__ import annotations

import atexit
import os
import sys

_after_serving = False


def quiet_after_serving() -> None:
    """The server has stopped (its heap frozen): the interpreter's own exit reports go unseen."""
    global _after_serving
    _after_serving = True


def _silence_standard_error() -> None:
    if not _after_serving:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


atexit.register(_silence_standard_error)
"""Registered when the server's command line is imported, before vLLM: atexit runs the last
registered first, so vLLM's own exit handlers write before this one silences the rest."""
