"""The one table of the backend's inputs and outputs (app/triton/tensors.py) is what the HTTP
body's schema, a model's metadata and config, and the docs list."""

from __future__ import annotations

import re
from pathlib import Path

from app.paths import PROJECT_ROOT
from app.repository.layout import ModelSpec
from app.schemas.generate import GenerateRequest, GenerateResponse
from app.triton.model_config import config_json, metadata_json
from app.triton.tensors import INPUTS, OUTPUTS

TRITON_HTTP_DOC = PROJECT_ROOT / "docs" / "protocols" / "triton-http.md"
NAME = re.compile(r"`(\w+)`")


def section(page: Path, title: str) -> str:
    """The text of `page` under the heading `## title`, up to the next one."""
    text = page.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def first_column(markdown: str) -> list[str]:
    """The backticked names in the first cell of each row of the tables in `markdown`."""
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in NAME.findall(row.split("|")[1])]


def test_the_docs_list_exactly_the_inputs_and_outputs_with_their_datatypes() -> None:
    documented_inputs = set(first_column(section(TRITON_HTTP_DOC, "Request body")))
    assert documented_inputs - {"parameters"} == {tensor.name for tensor in INPUTS}
    rows = [
        line for line in section(TRITON_HTTP_DOC, "Response").splitlines() if line.startswith("| `")
    ]
    documented = [(NAME.findall(row)[0], row.split("|")[3].split()[0]) for row in rows]
    assert documented == [(output.name, output.datatype) for output in OUTPUTS]


def test_the_generate_schemas_hold_every_input_and_output() -> None:
    assert {tensor.name for tensor in INPUTS} <= set(GenerateRequest.model_fields)
    assert {output.name for output in OUTPUTS} <= set(GenerateResponse.model_fields)


def test_a_models_metadata_and_config_list_the_table() -> None:
    spec = ModelSpec(name="m", version="1", version_path=Path("."), engine_args={})
    metadata = metadata_json("m", ["1"], spec)
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        (tensor.name, tensor.datatype, list(tensor.dims)) for tensor in INPUTS
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["outputs"]] == [
        (output.name, output.datatype, list(output.dims)) for output in OUTPUTS
    ]
    config = config_json(spec)
    assert [t.get("optional", False) for t in config["input"]] == [t.optional for t in INPUTS]
