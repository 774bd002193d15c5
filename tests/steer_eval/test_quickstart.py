"""``examples/quickstart.ipynb`` executed in a Jupyter kernel on the tiny random Gemma 3
(its parameters cell followed by one of the test's, as papermill injects parameters):
every cell runs, the answer cell renders the run's answer and the samples cell ten of
its texts, and the address is printed. The rendered cells are saved as markdown
(``STEER_EVAL_RENDERED=1`` also writes ``examples/quickstart.rendered.md``, the copy in
the tree)."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

import steer_eval

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
RENDERED = REPO / "examples" / "quickstart.rendered.md"


def injected(tmp: Path, model_dir: Path) -> str:
    """The test's parameters: the tiny model, tiny generations, folders under ``tmp``
    (written as ruff formats them: the rendered copy is checked by `make lint`)."""
    text = json.dumps
    return "\n".join(
        [
            "# Parameters injected by tests/steer_eval/test_quickstart.py",
            f"MODEL = {text(str(model_dir))}",
            f"VECTORS_DIR = {text(str(tmp / 'vectors'))}",
            f"RESULTS_DIR = {text(str(tmp / 'res'))}",
            "OPTIONS = {",
            '    "generation": {"max_new_tokens": 6, "batch_size": 16},',
            '    "controls": {"random_directions": 1},',
            '    "criteria": {"n_boot": 200},',
            f'    "classifier": {{"dir": {text(str(tmp / "cls"))}}},',
            "}",
        ]
    )


def with_parameters(notebook, source: str):
    """The notebook with a cell of ``source`` after its ``parameters`` cell."""
    at = next(
        i
        for i, cell in enumerate(notebook.cells)
        if "parameters" in cell.get("metadata", {}).get("tags", [])
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(at + 1, cell)
    return notebook


def rendered_markdown(notebook, replace: dict[str, str]) -> str:
    """Every cell as text: markdown cells as they are, code cells' sources and their
    outputs (a rich output by its markdown, else its plain text)."""
    lines = [
        "# examples/quickstart.ipynb, rendered",
        "",
        "Written by `tests/steer_eval/test_quickstart.py` (with `STEER_EVAL_RENDERED=1`),",
        "which runs the notebook on the tiny random Gemma 3 of `tests/conftest.py` (4 layers,",
        "width 64, a word-level tokenizer): its texts are noise, its run is real. Folders",
        "under the test's temporary directory read `<tmp>`.",
        "",
    ]
    for n, cell in enumerate(notebook.cells, 1):
        if cell.cell_type == "markdown":
            lines += [f"<!-- cell {n} -->", cell.source, ""]
            continue
        lines += [f"<!-- cell {n} -->", "```python", cell.source, "```", ""]
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                lines += [f"{output['name']}:", "```text", output["text"].rstrip(), "```", ""]
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                if "text/markdown" in data:
                    lines += ["Output (markdown):", "", data["text/markdown"].rstrip(), ""]
                else:
                    lines += ["Output:", "```text", data.get("text/plain", "").rstrip(), "```", ""]
            elif kind == "error":
                lines += ["Error:", "```text", "\n".join(output.get("traceback", [])), "```", ""]
    text = "\n".join(lines).rstrip() + "\n"
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


def cell_with(notebook, needle: str):
    return next(c for c in notebook.cells if c.cell_type == "code" and needle in c.source)


@pytest.fixture(scope="module")
def executed(tmp_path_factory, tiny_model_dir, mlflow_store):
    tmp = tmp_path_factory.mktemp("quickstart")
    notebook = with_parameters(nbformat.read(NOTEBOOK, as_version=4), injected(tmp, tiny_model_dir))
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(REPO / "examples")}},
    )
    client.execute()  # a cell that raises fails here, its traceback in the message
    text = rendered_markdown(notebook, {str(tmp): "<tmp>", str(tiny_model_dir): "<tiny-gemma>"})
    (tmp / "quickstart.rendered.md").write_text(text, encoding="utf-8")
    if os.environ.get("STEER_EVAL_RENDERED") == "1":
        RENDERED.write_text(text, encoding="utf-8")
    return notebook, text


def run_of(notebook) -> steer_eval.Result:
    """The run the notebook made, read back from the store by the id its answer names."""
    shown = cell_with(notebook, "answer_markdown").outputs[0]["data"]["text/markdown"]
    found = re.search(r"## The answer \(run `([0-9a-f]+)`\)", shown)
    assert found, shown[:300]
    return steer_eval.load_run(found.group(1))


def test_the_answer_cell_renders_the_runs_answer(executed):
    notebook, _ = executed
    run = run_of(notebook)
    (output,) = cell_with(notebook, "answer_markdown").outputs
    shown = output["data"]["text/markdown"]
    assert shown == run.answer_markdown()
    assert "**Question.**" in shown and "| group | criterion | value |" in shown
    assert "at layers 1, 2, 3 in one pass with the file's own vectors, h_l += s·1·v_l" in shown
    steering = run.record.config.steering
    assert (steering.layers, steering.scale, steering.coefficient) == ("file", "file", 1.0)
    assert run.record.config.concepts.synsets == ["herb.n.01", "person.n.01"]


def test_the_samples_cell_shows_ten_of_the_runs_texts_text_first(executed):
    notebook, _ = executed
    run = run_of(notebook)
    (output,) = cell_with(notebook, "result.samples").outputs
    table = output["data"]["text/html"]
    plain = output["data"]["text/plain"].splitlines()
    assert plain[0].split()[0] == "text"  # the text first
    assert [line.split()[0] for line in plain[1:11]] == [str(i) for i in range(10)]
    assert len(run.samples) > 10 and table.count("<tr") == 11  # header + ten rows
    for text in run.samples["text"].head(10):
        assert html.escape(text[:30], quote=False) in table


def test_the_address_and_the_command_line_are_printed(executed):
    notebook, text = executed
    run = run_of(notebook)
    printed = cell_with(notebook, "result.url").outputs[0]["text"]
    assert f"MLflow run: {run.url}" in printed and run.run_id in printed
    assert "the same run from the command line: steer-eval run --config" in printed
    assert "MLflow run: http" in text and "<tmp>" in text
    # the control vectors the notebook wrote, as repeng lays them out
    vectors = cell_with(notebook, "write_control_vector").outputs[0]["text"]
    assert "herb.n.01.gguf: model hint 'gemma3_text', norm per layer {1:" in vectors
