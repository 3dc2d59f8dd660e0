"""Text helpers shared by indexing and answering."""
from __future__ import annotations

# Function words dropped by the BM25 analyzer and ignored when matching question words.
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from
had has have how i if in into is it its me my no not of on or our she should so such than
that the their them then there these they this those to was we were what when where which
who whom why will with would you your""".split())


def embedding_text(context: str, text: str) -> str:
    """What the model embeds for a chunk: its context line, then its text."""
    return f"{context}\n{text}" if context else text
