"""The README stays a first page and the docs stay connected: every relative link and anchor
resolves, every docs page is linked from the README, and every command or file the docs name
(`python -m ...`, `bench/...py`, `make ...`) exists, and so does every test they name."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = sorted(["README.md", "bench/studies/README.md", "bench/results/README.md"]
               + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))])
LINK = re.compile(r"\]\(([^)\s]+)\)")
# `tests/<file>.py::<test>`, or `::<test>` naming one more test in the file named last
TEST_REF = re.compile(r"(tests/[\w/]+\.py)(?:::(test_\w+))?|(?<=`)::(test_\w+)")


def _text(page):
    return open(os.path.join(ROOT, page), encoding="utf-8").read()


def _anchors(page):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in _text(page).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


def test_the_readme_is_a_first_page():
    assert len(_text("README.md").splitlines()) <= 200
    for must in ("make run", "make test", "## Guarantees", "## Commands", "configs/flink-local.yaml",
                 "configs/local-s3.yaml"):
        assert must in _text("README.md"), must


def test_every_docs_page_is_linked_from_the_readme():
    linked = {os.path.normpath(t.split("#")[0]) for t in LINK.findall(_text("README.md"))}
    pages = {p for p in PAGES if p.startswith("docs/")}
    assert pages <= linked, pages - linked


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_and_anchors_resolve(page):
    for target in LINK.findall(_text(page)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        assert os.path.exists(os.path.join(ROOT, dest)), f"{page}: {target}"
        if anchor and dest.endswith(".md"):
            assert anchor in _anchors(dest), f"{page}: {target}: no heading #{anchor}"


@pytest.mark.parametrize("page", PAGES)
def test_named_modules_files_and_make_targets_exist(page):
    text = _text(page)
    for mod in set(re.findall(r"python -m ((?:bench|configs|pipelines|infra)[\w.]*)", text)):
        base = os.path.join(ROOT, *mod.split("."))
        assert os.path.exists(base + ".py") or os.path.exists(os.path.join(base, "__init__.py")), f"{page}: {mod}"
    for path in set(re.findall(r"\b((?:bench|configs|tests|infra|transforms|pipelines)/[\w./-]+\.(?:py|yaml|sh|md))", text)):
        assert os.path.exists(os.path.join(ROOT, path)), f"{page}: {path}"
    targets = set(re.findall(r"^([\w-]+):", _text("Makefile"), re.M))
    for target in set(re.findall(r"`make ([\w-]+)", text)):
        assert target in targets, f"{page}: make {target}"
    file = None
    for path, name, bare in TEST_REF.findall(text):
        file, name = path or file, name or bare
        if name:
            assert file and os.path.exists(os.path.join(ROOT, file)), f"{page}: ::{name} names no test file"
            assert re.search(rf"^\s*def {name}\(", _text(file), re.M), f"{page}: {file}::{name}"
