"""Articles and number for English noun phrases (the name-free texts' grammar).

Hand-written: no inflection library (inflect, pattern) is among the project's
dependencies, and the name-free texts need only "a"/"an" by the first sound (with the
common exceptions: "an hour", "a unit", "a one-off", "an X-ray") and regular plurals
beside WordNet's own exception list (mouse → mice).
"""

from __future__ import annotations

import re
from functools import cache

# Words spelled with a vowel that start with a consonant sound, and the reverse.
CONSONANT_SOUND = re.compile(
    r"^(uni|use|usu|ute|uti|eu|ewe|one|once|ubiq|uro|ura|u[bcfgklmnprst][aeiou])", re.I
)
VOWEL_SOUND = re.compile(r"^(hour|honest|honou?r|heir|herb)", re.I)


def indefinite(phrase: str) -> str:
    """ "a" or "an" before ``phrase`` by its first sound (the module's exceptions)."""
    first = phrase.split()[0] if phrase.split() else phrase
    if re.match(r"^[FHLMNRSX]$|^[FHLMNRSX][A-Z\-]", first):  # an initialism read by letter
        return f"an {phrase}"
    vowel = bool(re.match(r"[aeiou]", first, re.I))
    if (vowel and CONSONANT_SOUND.match(first)) or (not vowel and not VOWEL_SOUND.match(first)):
        return f"a {phrase}"
    return f"an {phrase}"


def plural(phrase: str) -> str:
    """The plural of a noun phrase: its head (the word before " of ", else the last)
    inflected by WordNet's exception list (mouse → mice), else the regular rules."""
    words = phrase.split(" ")
    head = words.index("of") - 1 if "of" in words[1:] else len(words) - 1
    words[head] = _plural_word(words[head])
    return " ".join(words)


@cache
def _irregular_plurals() -> dict[str, str]:
    from experiments.wordnet import _wordnet

    reader = _wordnet()
    exceptions = getattr(reader, "_exception_map", {}).get("n", {})
    out: dict[str, str] = {}
    for plural_form, singulars in sorted(exceptions.items()):
        for singular in singulars:
            out.setdefault(singular, plural_form)
    return out


def _plural_word(word: str) -> str:
    lower = word.lower()
    if lower in _irregular_plurals():
        return _irregular_plurals()[lower]
    if lower.endswith("man") and not lower.endswith(("human", "german")):
        return word[:-3] + "men"
    if re.search(r"(s|x|z|ch|sh)$", lower):
        return word + "es"
    if re.search(r"[^aeiou]y$", lower):
        return word[:-1] + "ies"
    return word + "s"
