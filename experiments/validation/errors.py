"""The one error type of Parts B and C, so the CLI can show it as a user error."""

from __future__ import annotations


class ValidationInputError(ValueError):
    """The input to human validation or the panel is wrong (file, run, answer key);
    the message says what and where."""
