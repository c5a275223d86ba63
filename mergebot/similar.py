"""Near-duplicate subtasks: the same work described twice, found before it is done twice. Pure.

Two subtasks are twins when their normalised text (title, then description: lower case, words only) shares at
least ``THRESHOLD`` of its character trigrams (Jaccard), their titles alone at least ``TITLE_THRESHOLD`` (a house
style shared by every description does not make "Port the parser" and "Port the printer" one task), and they
name the same numbers: "fix bug 12" and "fix bug 13" are different work however alike they read. The embedded
PostgreSQL has no ``pg_trgm``, so this is done here (the database only narrows the open subtasks to titles of
about the same length sharing a word).

``twins`` joins a batch against itself and against the open subtasks with prefix filtering (the all-pairs
similarity join): a pair above the threshold must share one of the rarest grams of each side's first few, so
only those pairs are compared, and only the new texts are indexed (the open ones only look up).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THRESHOLD = 0.8
TITLE_THRESHOLD = 0.7  # and the titles alone: a shared boilerplate description does not make two tasks one
_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Text:
    """One subtask's text, ready to compare."""

    key: Any  # hashable: the caller's name for the text
    grams: frozenset[str]
    numbers: tuple[str, ...]
    title: frozenset[str] = frozenset()  # the title's own grams


DESCRIPTION = 1000  # characters of the description that count


def normalise(title: str, description: str = "") -> str:
    return " ".join(_WORD.findall(f"{title} {description[:DESCRIPTION]}".lower()))


def words(title: str) -> set[str]:
    """A title's words of three letters or more, as the database splits them (the open subtasks a new one is
    compared with share one)."""
    return {w for w in re.split(r"[\W_]+", title.lower()) if len(w) >= 3}


def _grams(norm: str) -> frozenset[str]:
    padded = f" {norm} "
    return frozenset(padded[i:i + 3] for i in range(len(padded) - 2))


def text(key: Any, title: str, description: str = "") -> Text:
    norm = normalise(title, description)
    return Text(key, _grams(norm), tuple(sorted(_NUMBER.findall(norm))), _grams(normalise(title)))


def similarity(a: Text, b: Text) -> float:
    """Jaccard over trigrams; 0 when the texts name different numbers."""
    return _jaccard(a.grams, b.grams) if a.numbers == b.numbers else 0.0


def twins(new: Sequence[Text], old: Sequence[Text] = (), threshold: float = THRESHOLD
          ) -> list[tuple[Any, Any, float]]:
    """Every pair (a new text, a new or old one) at least ``threshold`` alike, with titles at least
    ``TITLE_THRESHOLD`` alike: (new key, other key, similarity), most alike first. Pairs among ``old`` are not
    reported (they exist already). Only the new texts are indexed; each text probes the index with its prefix,
    so the cost follows the old texts linearly."""
    everything = [*new, *old]
    freq = Counter(g for t in everything for g in t.grams)
    index: dict[str, list[int]] = defaultdict(list)
    found: dict[tuple[int, int], float] = {}
    n_new = len(new)
    for i, t in enumerate(everything):
        ordered = sorted(t.grams, key=lambda g: (freq[g], g))  # rarest first
        prefix = ordered[:len(ordered) - math.ceil(threshold * len(ordered)) + 1]
        seen: set[int] = set()
        for g in prefix:
            for j in index.get(g, ()):
                if j in seen:
                    continue
                seen.add(j)
                score = similarity(everything[j], t)
                if score >= threshold and _jaccard(everything[j].title, t.title) >= TITLE_THRESHOLD:
                    found[(j, i)] = score
            if i < n_new:
                index[g].append(i)
    out = [(everything[j].key, everything[i].key, round(score, 3)) for (j, i), score in found.items()]
    return sorted(out, key=lambda p: (-p[2], str(p[0]), str(p[1])))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)
