"""Dev sets of real documentation questions written outside this project (issue 34, item 1).

    python -m bench.faq_devsets [--out out/devsets] [--cache ~/.cache/ragbeam/debs] [--only perlfaq,gitfaq,sqlitefaq]
    make devsets

Rebuilds perlfaq (perl-doc), gitfaq (git-doc) and sqlitefaq (sqlite3-doc) from Debian packages
fetched with `apt-get download` (cached under --cache), each in the layout `ragbeam eval
--dataset` reads: <out>/<name>/{docs/, queries.jsonl, qrels/{test,tune,eval}.tsv, answers.jsonl,
licenses/, README.md}, split by source page into tune and eval halves. Which questions, which
pages are gold and which phrases a right answer names, per set: docs/evaluation.md "Real FAQ dev
sets". Never built from the Python documentation's FAQ (held back).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
PERL_TUNE_PAGES = {"perlfaq1", "perlfaq3", "perlfaq5", "perlfaq7", "perlfaq9"}
PACKAGES = {"perlfaq": "perl-doc", "gitfaq": "git-doc", "sqlitefaq": "sqlite3-doc"}
# sqlite3-doc pages left out of the sqlitefaq corpus: the FAQ, indexes, cross-reference tables,
# the requirements dump, capi3ref (every c3ref/ page again on one page) and release history
SQLITE_SKIP = re.compile(r"^(faq|index|docs|sitemap|toc|keyword_index|doc_\w+_crossref|requirements|"
                         r"syntaxdiagrams|capi3ref|changes|chronology|news|releaselog)\.html$")
MAX_GOLD = 8  # a question whose answer points to more pages is a reading list, not a question: dropped
# builtins too common in answers to point anywhere by themselves (syntax, not the answer)
PERL_STOP = {"print", "my", "our", "local", "return", "sub", "do", "if", "for", "foreach", "while",
             "until", "unless", "else", "elsif", "last", "next", "redo", "use", "no", "package",
             "require", "and", "or", "not", "xor", "x", "eq", "ne", "lt", "gt", "le", "ge", "cmp"}
QUOTE_LIKE = {"s", "y", "tr", "m", "q", "qq", "qw", "qx", "qr"}  # perlfunc items documented in perlop


# --- packages ---------------------------------------------------------------------------

class Debs:
    """`apt-get download` into a cache folder; `apt-get update` once, before the first download."""

    def __init__(self, cache: str):
        self.cache = os.path.expanduser(cache)
        self.updated = False

    def get(self, package: str) -> str:
        os.makedirs(self.cache, exist_ok=True)
        found = sorted(glob.glob(os.path.join(self.cache, f"{package}_*.deb")))
        if found:
            return found[-1]
        if not self.updated:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            self.updated = True
        subprocess.run(["apt-get", "download", "-qq", package], check=True, cwd=self.cache)
        found = sorted(glob.glob(os.path.join(self.cache, f"{package}_*.deb")))
        if not found:
            raise SystemExit(f"apt-get download {package}: no .deb in {self.cache}")
        return found[-1]


def unpack(deb: str, dest: str) -> str:
    subprocess.run(["dpkg-deb", "-x", deb, dest], check=True)
    return dest


# --- POD ----------------------------------------------------------------------------------

def pod_codes(text: str, code: str) -> list[str]:
    """The contents of every X<...> formatting code (X = code) in POD text, nested codes kept:
    L<perlfunc/open>, L<< C<$x> |perlop/"Quote-Like Operators" >>, L<C<sprintf>|perlfunc/sprintf>."""
    out = []
    i = 0
    while True:
        i = text.find(code + "<", i)
        if i < 0:
            return out
        if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
            i += 2
            continue
        j = i + 1
        m = re.match(r"<(<+)\s", text[j:])
        if m:  # L<< ... >> form: ends at whitespace + the same number of >
            n = len(m.group(1)) + 1
            end = re.compile(r"\s" + ">" * n).search(text, j + n)
            if not end:
                return out
            out.append(text[j + n:end.start()].strip())
            i = end.end()
            continue
        depth, k = 0, j
        while k < len(text):
            ch = text[k]
            if ch == "<" and k > 0 and text[k - 1].isalpha() and text[k - 1].isupper():
                depth += 1
            elif ch == ">":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        out.append(text[j + 1:k])
        i = k + 1


def pod_plain(text: str) -> str:
    """POD formatting codes stripped to their text (L<text|target> -> text, L<name/sec> -> sec in name)."""
    prev = None
    while prev != text:
        prev = text
        text = re.sub(r"[A-Z]<<+\s+(.*?)\s+>+>", lambda m: _plain_code(m.group(0)[0], m.group(1)), text)
        text = re.sub(r"([A-Z])<([^<>]*)>", lambda m: _plain_code(m.group(1), m.group(2)), text)
    return re.sub(r"\s+", " ", text).strip()


def _plain_code(code: str, body: str) -> str:
    if code == "E":
        return {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}.get(body, "")
    if code in ("X", "Z"):
        return ""
    if code == "L":
        if "|" in body:
            return body.split("|", 1)[0]
        name, _, sec = body.partition("/")
        return sec.strip('"') or name
    return body


def link_target(link: str) -> Optional[tuple[str, str]]:
    """(page name, section) of an L<...> body, or None for a URL or a link into the same page."""
    depth, cut = 0, -1
    for k, ch in enumerate(link):  # the | outside nested codes
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "|" and depth == 0:
            cut = k
            break
    target = link[cut + 1:].strip() if cut >= 0 else link.strip()
    if "://" in target or target.startswith(("/", '"')) or not target:
        return None
    name, _, sec = target.partition("/")
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z_][\w:]*", name):
        return None
    return name, pod_plain(sec.strip().strip('"'))


def perlfunc_names(perlfunc_pod: str) -> set[str]:
    """Builtin function names: the =item entries of perlfunc's alphabetical listing."""
    start = perlfunc_pod.find("=head2 Alphabetical Listing of Perl Functions")
    names = set()
    for m in re.finditer(r"^=item\s+([a-z_][a-z_0-9]*|-X)\b", perlfunc_pod[max(start, 0):], re.M):
        names.add(m.group(1))
    return names


def _code_phrase(code: str, builtins: set[str]) -> Optional[str]:
    code = pod_plain(code).strip()
    if re.fullmatch(r"[A-Z]\w*(?:::\w+)+", code):
        return code
    m = re.match(r"([a-z_][a-z_0-9]*)(?:\(|\s|$)", code)
    if m and m.group(1) in builtins and m.group(1) not in QUOTE_LIKE and m.group(1) not in PERL_STOP:
        return m.group(1)
    return None


def perlfaq_questions(pod: str, page: str, builtins: set[str]) -> list[dict]:
    """One record per =head2 of a perlfaq page: question, the pages its answer links to
    (links: [(name, section)]), and the functions/modules it names in code form (phrases)."""
    out = []
    parts = re.split(r"^(=head[12]\s+.*)$", pod, flags=re.M)
    for k in range(1, len(parts), 2):
        head, body = parts[k], parts[k + 1] if k + 1 < len(parts) else ""
        if not head.startswith("=head2"):
            continue
        question = pod_plain(head[len("=head2"):].strip())
        links = [t for t in (link_target(x) for x in pod_codes(body, "L")) if t]
        phrases: list[str] = []
        for name, sec in links:
            if name == "perlfunc" and sec:
                fn = re.match(r"-X|[a-z_][a-z_0-9]*", sec)
                if fn and (fn.group(0) in builtins or not builtins):
                    phrases.append(fn.group(0))
            elif "::" in name:
                phrases.append(name)
        for code in pod_codes(body, "C"):
            p = _code_phrase(code, builtins)
            if p:
                phrases.append(p)
        pages = [m.group(1) for m in re.finditer(r"perldoc\s+(?:-f\s+)?([\w:]+)", body)]
        pages += [pod_plain(c) for c in pod_codes(body, "C") if re.fullmatch(r"perl[a-z0-9]+", pod_plain(c))]
        if re.search(r"perldoc\s+-f\s", body):
            pages.append("perlfunc")
        if any(re.match(r"(?:tr|y|s|qq|qw|qx|qr|q|m)\s*[/{(|!#]", pod_plain(c)) for c in pod_codes(body, "C")):
            pages.append("perlop")  # s///, tr///, qq{} ...: perlop's quote-like operators
        out.append({"page": page, "n": len(out), "question": question, "links": links,
                    "phrases": list(dict.fromkeys(phrases)), "pages": list(dict.fromkeys(pages))})
    return out




def perl_gold(q: dict, keys: dict[str, str], body_names: Iterable[str] = ()) -> tuple[list[str], str]:
    """(gold doc keys, rule) of a perlfaq record. rule "link": the corpus pages its answer links
    to with L<...>; only when there is none, rule "code": the pages its code-form names stand for
    (a module page, perlfunc for a builtin outside PERL_STOP, perlop for s///, tr///, qq{} ...);
    "" when neither reaches the corpus."""
    gold = [keys[n] for n, _ in q["links"] if n in keys]
    if gold:
        return list(dict.fromkeys(gold)), "link"
    for p in list(q["phrases"]) + list(q.get("pages", [])):
        if p in keys:
            gold.append(keys[p])
        elif "::" not in p and p not in PERL_STOP and "perlfunc" in keys:
            gold.append(keys["perlfunc"])
    return list(dict.fromkeys(gold)), ("code" if gold else "")


# --- gitfaq (AsciiDoc) -------------------------------------------------------------------

def gitfaq_questions(txt: str) -> list[dict]:
    """One record per `Question?::` item of gitfaq.txt: its section, question, and the names
    its answer references (linkgit pages, `git CMD`s, code-form words for config keys/files)."""
    lines = txt.split("\n")
    out, section, cur = [], None, None
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"-{3,}", nxt) and len(nxt) == len(line) and not line.startswith(("[", "-")):
            section, cur = line.strip(), None
            continue
        m = re.match(r"^(\S.*\?)::\s*$", line)
        if m and section:
            cur = {"section": section, "n": len(out), "question": re.sub(r"`([^`]*)`", r"\1", m.group(1)),
                   "body": []}
            out.append(cur)
            continue
        if line.startswith("[[") or (section and re.fullmatch(r"-{3,}", line) and not cur):
            continue
        if cur is not None:
            cur["body"].append(line)
    for q in out:
        body = "\n".join(q.pop("body"))
        q["linkgit"] = list(dict.fromkeys(re.findall(r"linkgit:([\w.-]+)\[\d\]", body)))
        q["code"] = list(dict.fromkeys(re.findall(r"`([^`\n]+)`", body)))
    return out


def gitfaq_gold(q: dict, pages: set[str], config_text: str) -> tuple[list[str], list[str]]:
    """(gold page names, answer phrases) of a gitfaq record against the corpus's page names
    (without .html) and git-config's text (for configuration keys)."""
    gold, phrases = [], []
    for name in q["linkgit"]:
        if name in pages:
            gold.append(name)
            phrases.append(name.replace("git-", "git ", 1) if name.startswith("git-") else name)
    for code in q["code"]:
        m = re.match(r"git ([a-z][a-z-]*)\b", code)
        if m and f"git-{m.group(1)}" in pages:
            gold.append(f"git-{m.group(1)}")
            phrases.append(f"git {m.group(1)}")
        elif re.fullmatch(r"[a-z][a-zA-Z0-9-]*\.[a-zA-Z][a-zA-Z0-9.-]*", code) and \
                re.search(re.escape(code), config_text, re.I) and "git-config" in pages:
            gold.append("git-config")
            phrases.append(code)
        elif re.fullmatch(r"\.git[a-z]+", code) and code[1:] in pages:
            gold.append(code[1:])
            phrases.append(code)
    return list(dict.fromkeys(gold)), list(dict.fromkeys(phrases))


# --- sqlite3 FAQ (HTML) -------------------------------------------------------------------

def _html_text(s: str) -> str:
    import html
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", s))).strip()


def sqlitefaq_questions(page: str) -> list[dict]:
    """One record per `<a name="qN">` entry of sqlite's faq.html: number, question, the pages
    its answer links to (relative hrefs without #fragment) and the code-form names of its
    links (C API functions, SQL keywords, pragmas)."""
    out = []
    parts = re.split(r'<a name="q(\d+)"></a>', page)
    for k in range(1, len(parts), 2):
        n, body = int(parts[k]), parts[k + 1]
        m = re.search(r"<b>\(\d+\)\s*(.*?)</b>", body, re.S)
        if not m:
            continue
        answer = body[m.end():]
        links, phrases = [], []
        for href, text in re.findall(r'<a href="([^"]*)"[^>]*>(.*?)</a>', answer, re.S):
            if ":" in href or not href or href.startswith("#"):
                continue
            target, _, frag = href.partition("#")
            links.append(target)
            t = _html_text(text)
            if re.fullmatch(r"sqlite3_\w+(\(\))?", t):
                phrases.append(t.rstrip("()"))
            elif re.fullmatch(r"[A-Z][A-Z_]+(?: [A-Z_]+)*", t) and len(t) >= 3:
                phrases.append(t)
            elif target == "pragma.html" and frag.startswith("pragma_"):
                phrases.append(frag[len("pragma_"):])
        out.append({"n": n, "question": _html_text(m.group(1)), "links": list(dict.fromkeys(links)),
                    "phrases": list(dict.fromkeys(phrases))})
    return out


def alternate_split(sections: Iterable[str]) -> dict[str, str]:
    """Sections in document order -> tune, eval, tune, ..."""
    order = list(dict.fromkeys(sections))
    return {s: ("tune" if i % 2 == 0 else "eval") for i, s in enumerate(order)}


# --- writing ------------------------------------------------------------------------------

def write_set(out: Path, name: str, items: list[dict], readme: str, licence: str) -> dict:
    """items: {id, question, split, source, gold: [doc keys], phrases}, written less those with
    more than MAX_GOLD gold pages. docs/ is already there."""
    items = [it for it in items if len(it["gold"]) <= MAX_GOLD]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "licenses").mkdir(exist_ok=True)
    shutil.copy(licence, out / "licenses" / os.path.basename(licence))
    counts = {"tune": 0, "eval": 0}
    with open(out / "queries.jsonl", "w") as fq, open(out / "answers.jsonl", "w") as fa:
        for it in items:
            fq.write(json.dumps({"_id": it["id"], "text": it["question"],
                                 "metadata": {"source": it["source"], "split": it["split"],
                                              "gold_rule": it.get("gold_rule", "link")}}) + "\n")
            if it["phrases"]:
                fa.write(json.dumps({"id": it["id"], "answers": it["phrases"]}) + "\n")
            counts[it["split"]] += 1
    for split in ("test", "tune", "eval"):
        with open(out / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for it in items:
                if split in ("test", it["split"]):
                    for g in it["gold"]:
                        f.write(f"{it['id']}\t{g}\t1\n")
    docs = sum(1 for p in (out / "docs").rglob("*") if p.is_file())
    summary = {"name": name, "questions": len(items), **counts, "documents": docs,
               "with_phrases": sum(1 for it in items if it["phrases"])}
    (out / "README.md").write_text(readme + "\n\n```json\n" + json.dumps(summary, indent=1) + "\n```\n")
    return summary


def fresh_docs(out: Path) -> Path:
    """out/docs, empty: a set is rebuilt from nothing (out is this script's own output folder)."""
    if out.exists():
        shutil.rmtree(out)
    docs = out / "docs"
    docs.mkdir(parents=True)
    return docs


def build_perlfaq(root: str, out: Path) -> dict:
    pod_dir = glob.glob(os.path.join(root, "usr/share/perl/*/pod"))[0]
    man = os.path.join(root, "usr/share/man")
    docs = fresh_docs(out)
    keys: dict[str, str] = {}  # page or module name -> doc key under docs/
    excluded = re.compile(r"^(perlfaq\d?|perltoc|perl5\d+delta)$")
    for sub, ext in (("man1", ".1.gz"), ("man3", ".3perl.gz")):
        (docs / sub).mkdir(parents=True, exist_ok=True)
        for path in sorted(glob.glob(os.path.join(man, sub, "*" + ext))):
            name = os.path.basename(path)[:-len(ext)]
            if sub == "man1" and (excluded.match(name) or not name.startswith("perl")):
                continue
            key = f"{sub}/{name.replace('::', '-')}{ext[:-3]}"
            with gzip.open(path, "rb") as f:
                (docs / key).write_bytes(f.read())
            keys[name] = key
    builtins = perlfunc_names(Path(pod_dir, "perlfunc.pod").read_text(encoding="utf-8"))
    items = []
    for k in range(1, 10):
        page = f"perlfaq{k}"
        split = "tune" if page in PERL_TUNE_PAGES else "eval"
        for q in perlfaq_questions(Path(pod_dir, page + ".pod").read_text(encoding="utf-8"), page, builtins):
            gold, rule = perl_gold(q, keys)
            if not gold:
                continue
            items.append({"id": f"{split}-{page}-{q['n']}", "question": q["question"], "split": split,
                          "source": f"perl-doc {page}.pod", "gold": gold, "phrases": q["phrases"],
                          "gold_rule": rule})
    licence = os.path.join(root, "usr/share/doc/perl-doc/copyright")
    readme = ("# perlfaq dev set (built by bench/faq_devsets.py)\n\nQuestions: the =head2 headings of "
              "perlfaq1-9 (perl-doc, Debian); gold: the corpus pages their answers link to; answers.jsonl: "
              "functions and modules the answers name in code form. Corpus: perl-doc's man pages minus the "
              "FAQ pages, perltoc and perl5*delta. Licence: Perl's (GPL-1+ or Artistic), see licenses/.")
    return write_set(out, "perlfaq", items, readme, licence)


def build_gitfaq(root: str, out: Path) -> dict:
    src = os.path.join(root, "usr/share/doc/git-doc")
    docs = fresh_docs(out)
    pages = set()
    for path in sorted(glob.glob(os.path.join(src, "*.html"))):
        name = os.path.basename(path)[:-5]
        if name in ("gitfaq", "index"):
            continue
        shutil.copy(path, docs / os.path.basename(path))
        pages.add(name)
    config_text = re.sub(r"<[^>]+>", " ", Path(src, "git-config.html").read_text(encoding="utf-8"))
    records = gitfaq_questions(Path(src, "gitfaq.txt").read_text(encoding="utf-8"))
    splits = alternate_split(q["section"] for q in records)
    items = []
    for q in records:
        gold, phrases = gitfaq_gold(q, pages, config_text)
        if not gold:
            continue
        split = splits[q["section"]]
        items.append({"id": f"{split}-gitfaq-{q['n']}", "question": q["question"], "split": split,
                      "source": f"git-doc gitfaq.txt: {q['section']}", "gold": [f"{g}.html" for g in gold],
                      "phrases": phrases})
    licence = os.path.join(root, "usr/share/doc/git-doc/copyright")
    readme = ("# gitfaq dev set (built by bench/faq_devsets.py)\n\nQuestions: gitfaq(7) (git-doc, Debian); "
              "gold: the pages their answers reference (linkgit, `git CMD`, configuration keys -> git-config, "
              "`.gitX` files); corpus: git-doc's HTML pages minus gitfaq and index. Licence: GPL-2, see licenses/.")
    return write_set(out, "gitfaq", items, readme, licence)


def build_sqlitefaq(root: str, out: Path) -> dict:
    src = os.path.join(root, "usr/share/doc/sqlite3")
    docs = fresh_docs(out)
    (docs / "c3ref").mkdir()
    keys = set()
    for path in sorted(glob.glob(os.path.join(src, "*.html")) + glob.glob(os.path.join(src, "c3ref", "*.html"))):
        key = os.path.relpath(path, src)
        if SQLITE_SKIP.match(key) or key.startswith("c3ref/") and os.path.basename(key) in ("funclist.html",
                                                                                          "objlist.html", "constlist.html"):
            continue
        shutil.copy(path, docs / key)
        keys.add(key)
    items = []
    for q in sqlitefaq_questions(Path(src, "faq.html").read_text(encoding="utf-8")):
        gold = [h for h in q["links"] if h in keys]
        if not gold:
            continue
        split = "tune" if q["n"] % 2 else "eval"
        items.append({"id": f"{split}-sqlitefaq-{q['n']}", "question": q["question"], "split": split,
                      "source": f"sqlite3-doc faq.html ({q['n']})", "gold": gold, "phrases": q["phrases"]})
    licence = os.path.join(root, "usr/share/doc/sqlite3-doc/copyright")
    readme = ("# sqlitefaq dev set (built by bench/faq_devsets.py)\n\nQuestions: SQLite's faq.html (sqlite3-doc, "
              "Debian); gold: the corpus pages their answers link to; answers.jsonl: the C functions, SQL keywords "
              "and pragmas those links name. Corpus: sqlite3-doc's HTML pages and c3ref/ minus the FAQ, indexes, "
              "cross-reference tables, requirements, capi3ref and release history. Split: odd-numbered questions "
              "tune, even eval. Licence: public domain, see licenses/.")
    return write_set(out, "sqlitefaq", items, readme, licence)


BUILDERS = {"perlfaq": build_perlfaq, "gitfaq": build_gitfaq, "sqlitefaq": build_sqlitefaq}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "out" / "devsets"))
    ap.add_argument("--cache", default="~/.cache/ragbeam/debs")
    ap.add_argument("--only", default="", help="comma-separated set names (default: all)")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(BUILDERS)
    debs = Debs(args.cache)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="faq_devsets_") as tmp:
        for name in names:
            root = unpack(debs.get(PACKAGES[name]), os.path.join(tmp, name))
            s = BUILDERS[name](root, Path(args.out) / name)
            summaries.append(s)
            print(json.dumps(s))
    total = sum(s["questions"] for s in summaries)
    print(f"{total} questions over {len(summaries)} corpora in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
