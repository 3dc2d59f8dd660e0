"""Words and the word lists that drop them: the one home of every stopword list.

The lists differ on purpose, each fitted to its use; changing one changes rankings or answers,
and BM25_STOPWORDS or ANSWER_STOPWORDS also change what a segment holds, so both are part of
the segment id (transforms/index/segments.py analysis_fingerprint).
"""
from __future__ import annotations

import hashlib
import re

# Function words the BM25 analyzer drops from documents and questions (transforms/index/bm25.py);
# the legacy extractive answerer's overlap uses them too.
BM25_STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from
had has have how i if in into is it its me my no not of on or our she should so such than
that the their them then there these they this those to was we were what when where which
who whom why will with would you your""".split())

# Function words content_words drops: the answerer's lexical overlap with the question, and the
# content words a segment stores for their idf (words.arrow).
ANSWER_STOPWORDS = frozenset("""a an and are as at be by can do does did for from has have had how i if in is it its
of on or that the this to was were what when where which who whom whose why will with you your""".split())

# Words that carry no claim of their own in a generated answer (function words, and the model's
# framing words): the grounding check does not look for them in the sources.
CLAIM_FRAME_WORDS = frozenset("""a an and are as at be been but by can could do does did for from has have had how i if in
into is it its may might must no not of on or our should so such than that the their them then there these
they this those to was we were what when where which while who whom whose why will with would you your also
according answer based both each either source sources text question states stated says said using use used
via within without yes""".split())

# Words after a number that are not units: they name what is counted, not how it is measured
# ("3 files" is no quantity to compare between sources; "3 MB" is).
NOT_UNIT_WORDS = frozenset("""a an and or the of to in on at by for is are was were be it its this that with as from
than then when which who times items steps lines files pages words characters chars
""".split())

WORD = re.compile(r"[a-z0-9_]+")  # a content word, in lower-cased text


def content_words(text: str) -> set[str]:
    """The lower-cased words of `text` longer than one character, less ANSWER_STOPWORDS."""
    return {w for w in WORD.findall(text.lower()) if w not in ANSWER_STOPWORDS and len(w) > 1}


def content_words_fingerprint() -> str:
    """What decides content_words' output (its pattern and stopwords), read when called."""
    parts = ["content-words-v1", WORD.pattern, *sorted(ANSWER_STOPWORDS)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
