"""sample_table on rows that carry no ``split`` column (every row is a report row)."""

from __future__ import annotations

import pandas as pd

from experiments.phase5.samples import COLUMNS, sample_table


def test_rows_without_a_split_column_are_report_rows() -> None:
    # Records written before the selection split had no "split" column: the table reads
    # them all as report rows (it had indexed the frame with a bare True: KeyError).
    records = pd.DataFrame({"key": ["a", "b"], "text": ["one", "two"]})
    table = sample_table(records, config=None)  # the config is not read: no arms
    assert list(table.columns) == list(COLUMNS)
    assert table.empty
