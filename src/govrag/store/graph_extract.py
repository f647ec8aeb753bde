"""Entities and relations in text, deterministically: the graph leg's extraction.

The same function reads a chunk at ingest and a question at search time, so a question finds
what a chunk was filed under. Three sources, no model:

- the deployment's **glossary** (``entities/*.jsonl``): known entities with every name they
  go by (a legal name, a short name, an LEI) and their relations (``parent_of``...). A name
  found in the text (whole words, case and width folded) is a mention of that entity;
- **identifiers** by pattern, each checked where a check exists, so a random string is not
  one: LEI and IBAN (ISO 7064 mod 97-10), ISIN (its Luhn check digit), e-mail addresses,
  contract numbers ("Contract No. FS-2024-117"), amounts with a currency ("EUR 50,000") and
  dates (ISO, and "1 March 2026"). An identifier the glossary lists as a name of an entity
  is a mention of that entity;
- **defined terms**: ``Acme Cloud Analytics Ltd ("Acme")`` names one party two ways; the
  pair is an ``alias_of`` relation *of that chunk*, so it counts only for callers who may
  read the chunk (``graph.py``).

An entity is a ``(kind, name)`` pair: ``("entity", <glossary id>)`` for a glossary entity,
``(<identifier kind>, <normalised value>)`` for an identifier, ``("term", <folded name>)``
for a defined term's names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from govrag.store.glossary import Glossary, fold

#: A ``(kind, name)`` pair.
Entity = tuple[str, str]

_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"], start=1)}  # fmt: skip
_LEI = re.compile(r"\b([0-9A-Z]{18}[0-9]{2})\b")
_IBAN = re.compile(r"\b([A-Z]{2}[0-9]{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?)\b")
_ISIN = re.compile(r"\b([A-Z]{2}[A-Z0-9]{9}[0-9])\b")
# Every repeated run is bounded: the patterns scan each start position of a chunk that may be
# one 2 MB word, so an unbounded run (``[...]+`` before a literal that never comes) would be
# quadratic in it. An e-mail's local part is at most 64 characters, its domain 253.
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,24}\b")
_CONTRACT = re.compile(
    r"\b(?:contract|agreement|reference|ref\.?)\s{1,4}(?:no\.?|number|#)\s{0,4}"
    r"([A-Z0-9][A-Z0-9/-]{2,30})",
    re.IGNORECASE | re.ASCII,
)
_AMOUNT = re.compile(
    r"\b(EUR|USD|GBP|CHF|SEK|NOK|DKK|PLN|JPY)\s?([0-9]{1,3}(?:[,.' ][0-9]{3}){1,6}|[0-9]{1,15})"
    r"(?:\s?(million|m|bn|billion|k))?\b",
    re.IGNORECASE | re.ASCII,
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# ASCII case-folding only: with Unicode rules "aprİl" would match "april" and then miss the
# month table.
_LONG_DATE = re.compile(
    r"\b(\d{1,2})\s+(" + "|".join(_MONTHS) + r")\s+(\d{4})\b", re.IGNORECASE | re.ASCII
)
_DEFINED = re.compile(
    r"([A-Z][\w&.,'-]{0,40}(?:\s+(?:[A-Z][\w&.,'-]{0,40}|of|and|&|de|du|la|van|von)){0,8})"
    r"\s{0,4}\(\s{0,4}(?:the\s+|hereinafter\s+)?[\"“”']([^\"“”']{2,60})[\"“”']\s{0,4}\)"
)
_SCALE = {"k": 1_000, "m": 1_000_000, "million": 1_000_000, "bn": 10**9, "billion": 10**9}


@dataclass(frozen=True)
class Extracted:
    mentions: frozenset[Entity]
    #: ``(source, target, kind)``: relations the text itself states (defined terms).
    relations: frozenset[tuple[Entity, Entity, str]]


def extract(text: str, glossary: Glossary | None = None) -> Extracted:
    """The entities ``text`` mentions and the relations it states (see the module docstring)."""
    glossary = glossary or Glossary()
    found: set[Entity] = {("entity", e) for e in glossary.mentions(fold(text))}
    for kind, value in _identifiers(text):
        known = glossary.entity_named(value)
        found.add(("entity", known) if known is not None else (kind, value))
    relations: set[tuple[Entity, Entity, str]] = set()
    for full, alias in _DEFINED.findall(text):
        full_name, short = fold(full.strip(" ,")), term_name(alias)
        if not full_name or full_name == short or len(full_name) > 120:
            continue
        a = _named(glossary, full_name)
        b = _named(glossary, short)
        found.update((a, b))
        relations.add((b, a, "alias_of"))
    return Extracted(frozenset(found), frozenset(relations))


def term_name(text: str) -> str:
    """A defined term's name: folded, without a leading "the" ("the Supplier" is "supplier")."""
    folded = fold(text)
    return folded[4:] if folded.startswith("the ") else folded


def term_mentions(text: str, terms: set[str]) -> set[Entity]:
    """The ``terms`` (folded names) that occur in ``text`` as whole words."""
    folded = fold(text)
    return {("term", t) for t in terms if re.search(r"(?<!\w)" + re.escape(t) + r"(?!\w)", folded)}


#: Words of a question read for defined terms: questions are short; a 4 KiB one must not
#: turn into thousands of lookups.
MAX_QUESTION_WORDS = 64


def phrases(text: str, longest: int = 5) -> set[str]:
    """Every run of 1 to ``longest`` words of ``text``'s first :data:`MAX_QUESTION_WORDS`
    (folded, punctuation dropped): the names a question may call a defined term by."""
    words = re.findall(r"[\w&.'-]{1,100}", fold(text))
    words = [w.strip(".'-") for w in words if w.strip(".'-")][:MAX_QUESTION_WORDS]
    return {" ".join(words[i : i + n]) for n in range(1, longest + 1)
            for i in range(len(words) - n + 1)}  # fmt: skip


def _named(glossary: Glossary, folded: str) -> Entity:
    known = glossary.entity_named(folded)
    return ("entity", known) if known is not None else ("term", folded)


def _identifiers(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for m in _LEI.findall(text):
        if _mod97(m):
            out.append(("lei", m))
    for m in _IBAN.findall(text):
        compact = m.replace(" ", "")
        if 15 <= len(compact) <= 34 and _mod97(compact[4:] + compact[:4]):
            out.append(("iban", compact))
    out.extend(("isin", m) for m in _ISIN.findall(text) if _isin_ok(m))
    out.extend(("email", m.casefold()) for m in _EMAIL.findall(text))
    out.extend(("contract", m.upper().rstrip("/-")) for m in _CONTRACT.findall(text))
    for currency, digits, scale in _AMOUNT.findall(text):
        number = int(re.sub(r"[,.' ]", "", digits)) * _SCALE.get(scale.casefold(), 1)
        out.append(("amount", f"{currency.upper()} {number}"))
    for y, mo, d in _ISO_DATE.findall(text):
        out.append(("date", f"{y}-{mo}-{d}"))
    for d, month, y in _LONG_DATE.findall(text):
        out.append(("date", f"{y}-{_MONTHS[month.lower()]:02d}-{int(d):02d}"))
    return out


def _mod97(value: str) -> bool:
    """ISO 7064 mod 97-10 (letters as 10..35): the check of LEIs and of IBANs rotated."""
    digits = "".join(str(int(c, 36)) for c in value)
    return int(digits) % 97 == 1


def _isin_ok(isin: str) -> bool:
    digits = "".join(str(int(c, 36)) for c in isin[:-1])
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch) * (2 if i % 2 == 0 else 1)
        total += n // 10 + n % 10
    return (10 - total % 10) % 10 == int(isin[-1])
