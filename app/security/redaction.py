"""Error messages fit for a client: no server paths, no temporary folders, no validation
dumps, no stack traces. The full message goes to the server's log."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

OVERRIDE_FOLDER = re.compile(r"(?:/[^\s'\"/]+)*/model-override-[^\s'\"/]+/")
"""A load override's temporary folder, up to the model folder inside it."""
ABSOLUTE_PATH = re.compile(r"(?<![\w:/.])(?:/[\w.@+-]+)+/([\w.@+-]+)")
"""An absolute path of two or more parts (not a URL's): only its last part is shown."""
VALIDATION_INPUT = re.compile(r", input_value=.*?(?=\])")
VALIDATION_LINK = re.compile(r"\n? *For further information visit \S+")
TRACEBACK = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*(?:\n|$))*")
"""A formatted traceback's heading and frames (a remote error's text often holds one): the
exception's own last line stays."""


def without_dumps(message: str) -> str:
    """`message` less pydantic's echo of the input and its help link, and less the frames of
    any traceback it holds."""
    message = TRACEBACK.sub("", message)
    return VALIDATION_LINK.sub("", VALIDATION_INPUT.sub("", message))


def client_message(message: str, roots: Iterable[Path] = ()) -> str:
    """`message` with paths under `roots` shown relative to them, temporary override folders
    dropped, other absolute paths cut to their last part and dumps removed (`without_dumps`)."""
    message = OVERRIDE_FOLDER.sub("", message)
    for root in sorted((str(root).rstrip("/") for root in roots), key=len, reverse=True):
        if root:
            message = message.replace(root + "/", "")
    return ABSOLUTE_PATH.sub(r"\1", without_dumps(message))
