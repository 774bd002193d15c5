"""The one error :func:`steer_eval.evaluate` and :func:`steer_eval.load_run` raise for
bad input of their own: it names the argument and the fix, before any model loads."""

from __future__ import annotations


class ArgumentError(ValueError):
    """An argument that cannot be used; the message names it and says what to pass.

    A ``ValueError``, as the suite's own config, concept and vector-file errors are, so
    ``except ValueError`` catches every input error of a call."""
