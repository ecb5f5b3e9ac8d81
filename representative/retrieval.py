"""Retrieval for the representative face: an agent's grounding documents, and the passages of
them that answer a visitor's question (a transparent lexical score, no model)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from django.db.models import QuerySet

from agents.models import Agent
from representative.models import GroundingDocument

# Passages are paragraphs, cut at sentence ends to at most this many characters.
PASSAGE_CHARS = 700
# Passages quoted in one offline answer: the best, and the next if it scores at least half as well.
QUOTED_PASSAGES = 2
# Words too common to tell passages apart.
# fmt: off
_STOPWORDS = frozenset({
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "for", "from", "get",
    "give", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "know", "let", "like", "me", "my", "no", "nor", "not", "of", "on",
    "or", "our", "ours", "please", "she", "should", "show", "so", "some", "tell", "than", "that", "the",
    "their", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "up", "very", "want", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "would", "you", "your", "yours",
})
# fmt: on
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Passage:
    """A piece of one grounding document and its score against a question (higher is better)."""

    title: str
    text: str
    score: float


def grounding(agent: Agent) -> QuerySet[GroundingDocument]:
    """The agent's own grounding documents, by title: all the representative may read of its tenant."""
    return GroundingDocument.objects.for_tenant(agent.tenant_id).filter(agent=agent).order_by("title", "pk")


def retrieve(*, agent: Agent, question: str) -> list[Passage]:
    """The passages of ``agent``'s grounding documents that answer ``question``, best first.

    Transparent lexical scoring: words are lower-cased ``\\w+`` runs, minus
    stop words and one-letter words, with a plural ``s`` dropped. A passage
    (a paragraph, with its document's title) scores the sum of
    ``ln(1 + N / df)`` over the question's words it contains (``N`` passages,
    ``df`` of them containing the word). It answers only if it contains at
    least a third of the question's words (one, for up to three). The best
    passage is returned, and up to :data:`QUOTED_PASSAGES` in all that score
    at least half as well; none when nothing answers.
    """
    terms = set(_words(question))
    if not terms:
        return []
    pieces = [(doc.title, text) for doc in grounding(agent) for text in _passages(doc.text)]
    bags = [set(_words(f"{title} {text}")) for title, text in pieces]
    df = Counter(word for bag in bags for word in bag & terms)
    needed = max(1, math.ceil(len(terms) / 3))
    scored = []
    for (title, text), bag in zip(pieces, bags, strict=True):
        hits = bag & terms
        if len(hits) >= needed:
            scored.append(Passage(title, text, sum(math.log(1 + len(pieces) / df[w]) for w in hits)))
    scored.sort(key=lambda p: -p.score)
    return [p for p in scored[:QUOTED_PASSAGES] if p.score >= scored[0].score / 2]


def _words(text: str) -> list[str]:
    words = []
    for word in _WORD.findall(text.casefold()):
        if len(word) < 2 or word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(word)
    return words


def _passages(text: str) -> list[str]:
    """Paragraphs of ``text``, each cut at sentence ends into pieces of at most :data:`PASSAGE_CHARS`."""
    pieces = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        current = ""
        for sentence in _SENTENCE_END.split(paragraph):
            if current and len(current) + 1 + len(sentence) > PASSAGE_CHARS:
                pieces.append(current)
                current = ""
            current = f"{current} {sentence}".strip()[:PASSAGE_CHARS]
        if current:
            pieces.append(current)
    return pieces
