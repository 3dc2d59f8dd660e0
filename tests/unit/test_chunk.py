"""The chunker's token budget, determinism, and the contextualizer's reserve."""
import pytest

from transforms.ingest.chunk import ChunkSettings, chunk_document
from transforms.ingest.contextualize import contextualize, make_contextualizer
from transforms.records import Document, Section
from transforms.model.tokens import load_tokenizer

TOK = load_tokenizer()
SETTINGS = ChunkSettings()


def doc(sections, title="A title", content_hash="h" * 64):
    return Document(doc_id="d1", content_hash=content_hash, source_uri="file:///x", key="x",
                    format="text", title=title, sections=sections)


def full_tokens(chunk):
    """Word pieces the model sees for context + text, special tokens included."""
    return len(TOK.encode(chunk.embed_text).ids)


ODD_INPUTS = {
    "long prose": "\n\n".join(f"Paragraph {i}. " + "The quick brown fox jumps over the lazy dog. " * 12
                              for i in range(20)),
    "one huge word": "x" * 20000,
    "no spaces, punctuation": "-._/" * 3000,
    "long code line": "foo(bar, baz=[1, 2, 3]) + " * 800,
    "cjk": "日本語のテキストです。" * 500,
    "emoji": "🚀 launch " * 2000,
    "many short lines": "\n".join(f"line {i}" for i in range(3000)),
}


@pytest.mark.parametrize("name", sorted(ODD_INPUTS))
def test_chunk_plus_context_never_exceeds_model_limit(name):
    long_title = "Very long title " * 40
    d = doc([Section(["Heading " * 30, "Sub"], ODD_INPUTS[name])], title=long_title)
    chunks = contextualize(chunk_document(d, TOK, SETTINGS), make_contextualizer("title_path"),
                           TOK, SETTINGS.context_tokens)
    assert chunks
    for c in chunks:
        assert full_tokens(c) <= SETTINGS.model_max_tokens, (name, full_tokens(c))
        assert c.n_tokens <= SETTINGS.model_max_tokens


def test_no_text_is_lost_without_overlap():
    text = "\n\n".join(f"Sentence {i} is here. And another one follows it." for i in range(200))
    s = ChunkSettings(overlap_tokens=0)
    chunks = chunk_document(doc([Section([], text)]), TOK, s)
    assert len(chunks) > 3
    joined = " ".join(c.text for c in chunks).split()
    assert joined == text.split()


def test_a_long_tables_rows_stay_lines_with_the_tokens_unchanged():
    # a man page's 128-row table is one paragraph of lines, over the budget: it is cut at its
    # lines, and each chunk keeps one row per line (an answer quotes a row); what the model and
    # BM25 see is the same as with the rows joined by spaces
    rows = ["Oct | Dec | Hex | Char"] + [f"{i:03o} | {i} | {i:02X} | c{i}" for i in range(128)]
    chunks = chunk_document(doc([Section(["DESCRIPTION"], "\n".join(rows))]), TOK, ChunkSettings(overlap_tokens=0))
    assert len(chunks) > 2
    lines = [line for c in chunks for line in c.text.split("\n")]
    assert lines == rows
    for c in chunks:
        assert TOK.encode(c.text).ids == TOK.encode(" ".join(c.text.split())).ids


def test_overlap_carries_the_tail_of_the_previous_chunk():
    text = " ".join(f"Fact number {i} is stated here." for i in range(300))
    chunks = chunk_document(doc([Section([], text)]), TOK, ChunkSettings(overlap_tokens=32))
    assert len(chunks) > 2
    last_sentence = chunks[0].text.split(". ")[-1]
    assert last_sentence in chunks[1].text


def test_sections_are_not_mixed_and_keep_their_path_and_page():
    d = doc([Section(["A"], "alpha text."), Section(["A", "B"], "beta text.", page=3)])
    chunks = chunk_document(d, TOK, SETTINGS)
    assert [(c.heading_path, c.page, c.text) for c in chunks] == [
        (["A"], None, "alpha text."), (["A", "B"], 3, "beta text.")]


def test_ids_are_deterministic_and_depend_on_content_and_settings():
    d = doc([Section([], "some text. " * 300)])
    a = [c.chunk_id for c in chunk_document(d, TOK, SETTINGS)]
    b = [c.chunk_id for c in chunk_document(d, TOK, SETTINGS)]
    assert a == b and len(set(a)) == len(a)
    other_content = [c.chunk_id for c in chunk_document(doc(d.sections, content_hash="g" * 64), TOK, SETTINGS)]
    assert not set(a) & set(other_content)
    other_settings = [c.chunk_id for c in chunk_document(d, TOK, ChunkSettings(chunk_tokens=100))]
    assert not set(a) & set(other_settings)


def test_context_is_title_and_section_path():
    chunks = chunk_document(doc([Section(["Install", "On Debian"], "apt install x")], title="Guide"),
                            TOK, SETTINGS)
    (c,) = contextualize(chunks, make_contextualizer("title_path"), TOK, SETTINGS.context_tokens)
    assert c.context == "Guide › Install › On Debian"
    assert c.text == "apt install x"  # the raw text stays separate for citation
    assert c.embed_text.startswith("Guide › Install › On Debian\n")


def test_unknown_contextualizer_is_a_clear_error():
    with pytest.raises(ValueError, match="contextualize.kind"):
        make_contextualizer("llm-magic")


def test_the_index_summary_counts_the_cut_contexts():
    from transforms.index.manifest import reconcile
    s = reconcile({"llm_contexts_written": 5, "llm_contexts_cut": 2}, listed=0)
    assert (s["llm_contexts_written"], s["llm_contexts_cut"]) == (5, 2)
