"""Near-duplicate subtasks: the same work described twice, found before it is done twice. Pure.

Two subtasks are twins when their normalised text (title, then description: lower case, words only) shares at
least ``THRESHOLD`` of its character trigrams (Jaccard) and names the same numbers: "fix bug 12" and "fix bug 13"
are different work however alike they read. The embedded PostgreSQL has no ``pg_trgm``, so this is done here.

``twins`` joins a batch against itself and against the open subtasks with prefix filtering (the all-pairs
similarity join): a pair above the threshold must share one of the rarest grams of each side's first few, so
only those pairs are compared. A tree of thousands of nodes is checked in well under a second.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THRESHOLD = 0.8
_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Text:
    """One subtask's text, ready to compare."""

    key: Any  # hashable: the caller's name for the text
    grams: frozenset[str]
    numbers: tuple[str, ...]


def normalise(title: str, description: str = "") -> str:
    return " ".join(_WORD.findall(f"{title} {description[:4000]}".lower()))


def text(key: Any, title: str, description: str = "") -> Text:
    norm = normalise(title, description)
    padded = f" {norm} "
    grams = frozenset(padded[i:i + 3] for i in range(len(padded) - 2))
    return Text(key, grams, tuple(sorted(_NUMBER.findall(norm))))


def similarity(a: Text, b: Text) -> float:
    """Jaccard over trigrams; 0 when the texts name different numbers."""
    if a.numbers != b.numbers or not a.grams or not b.grams:
        return 0.0
    shared = len(a.grams & b.grams)
    return shared / (len(a.grams) + len(b.grams) - shared)


def twins(new: Sequence[Text], old: Sequence[Text] = (), threshold: float = THRESHOLD
          ) -> list[tuple[Any, Any, float]]:
    """Every pair (a new text, a new or old one) at least ``threshold`` alike: (new key, other key, similarity),
    most alike first. Pairs among ``old`` are not reported (they exist already)."""
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
            for j in index[g]:
                if j in seen or (i >= n_new and j >= n_new):
                    continue
                seen.add(j)
                score = similarity(everything[j], t)
                if score >= threshold:
                    found[(j, i)] = score
            index[g].append(i)
    out = []
    for (j, i), score in found.items():
        a, b = (j, i) if j < n_new else (i, j)  # the new one first
        out.append((everything[a].key, everything[b].key, round(score, 3)))
    return sorted(out, key=lambda p: (-p[2], str(p[0]), str(p[1])))
