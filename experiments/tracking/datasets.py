"""A run's inputs as MLflow datasets: the concept graph, the prompt set, the ratings CSV.

``log_input`` records a dataset's name, digest (a hash of its content), schema and
source on the run, so the runs table's Dataset column says what a run was made from
and two runs on different inputs are told apart at a glance. The content itself stays
where it is (the source path); nothing is copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from experiments import tracking

if TYPE_CHECKING:
    import pandas as pd

    from experiments.concepts import ConceptGraph

CONTEXT_TAG = "mlflow.data.context"


def log_dataset(
    run_id: str, frame: pd.DataFrame, name: str, source: str | Path, context: str
) -> str:
    """Log ``frame`` as the dataset ``name`` read from ``source``; returns its digest."""
    import warnings

    from mlflow.data.pandas_dataset import from_pandas  # mlflow.data.from_pandas, typed
    from mlflow.entities import DatasetInput, InputTag

    uri = str(source) if "://" in str(source) else Path(source).resolve().as_uri()
    with warnings.catch_warnings():  # MLflow registers its local source twice and says so
        warnings.simplefilter("ignore", UserWarning)
        dataset = from_pandas(frame, source=uri, name=name)
    entity = DatasetInput(dataset._to_mlflow_entity(), [InputTag(CONTEXT_TAG, context)])
    tracking.client().log_inputs(run_id, datasets=[entity])
    return dataset.digest


def concept_frame(graph: ConceptGraph) -> pd.DataFrame:
    """One row per concept: the graph's content that Δ and the probes depend on."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "synset": c.synset,
                "name": c.name,
                "pos": c.pos,
                "lemmas": ", ".join(c.lemmas),
                "gloss": c.gloss,
                "n_links": c.n_links,
                "related": ", ".join(c.related_synsets()),
                "negatives": ", ".join(n.synset for n in c.negatives),
            }
            for c in graph.concepts
        ]
    )
