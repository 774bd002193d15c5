"""Parsing single ratings and matching topic guesses to concepts."""

from __future__ import annotations

from experiments.validation.human.ratings import (
    guess_is_correct,
    normalise_sample_id,
    parse_rating,
)


def test_guess_matching():
    assert guess_is_correct("Birds, probably", "bird genus", ["bird genus"])
    assert guess_is_correct("a bird genus", "bird genus", ["bird genus"])
    assert not guess_is_correct("genus", "bird genus", ["bird genus"])
    assert not guess_is_correct("fish", "bird genus", ["bird genus"])
    assert guess_is_correct("bushes", "shrub", ["shrub", "bush"])
    assert guess_is_correct("someone", "person", ["person", "individual", "someone"])
    assert not guess_is_correct("", "person", ["person"])
    assert not guess_is_correct("personal", "person", ["person"])


def test_parse_rating_and_sample_ids():
    assert parse_rating(" 7 ") == (7, None)
    assert parse_rating("7.0") == (7, None)
    assert parse_rating("'0") == (
        None,
        'rating "\'0" is not a number (expected an integer 0-10, digits only)',
    )
    for lenient in ("\t7", "+7", "7_0", "-0", "7\n", "1e1", "٧"):  # int() takes most of these
        rating, problem = parse_rating(lenient)
        assert rating is None and "not a number" in problem, lenient
    assert parse_rating("") == (None, None)
    assert "out of range" in parse_rating("11")[1]
    assert "whole number" in parse_rating("7.5")[1]
    assert "not a number" in parse_rating("nan-ish")[1]
    known = {"007": {}, "010": {}}
    assert normalise_sample_id("7", known) == "007"
    assert normalise_sample_id("010", known) == "010"
    assert normalise_sample_id("x", known) == "x"
