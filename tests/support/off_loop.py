"""Where a costly step ran: a stand-in around it records each call's thread, and a call off
the main thread may end only once the event loop turned (a test sets `loop_turned` from a
task of the loop), so a step run on the loop is seen, not hung."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadRecord"]


class ThreadRecord:
    """The threads a wrapped step ran in, and whether the loop turned while each ran off it."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.loop_turned = threading.Event()
        self.loop_ran: list[bool] = []

    def wrapping(self, step: Callable[..., Any]) -> Callable[..., Any]:
        """`step`, recorded here."""

        @functools.wraps(step)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.threads.append(threading.current_thread())
            if threading.current_thread() is not threading.main_thread():
                self.loop_ran.append(self.loop_turned.wait(timeout=10))
            return step(*args, **kwargs)

        return recorded
