"""bench/faq_devsets.py's extraction on small vendored snippets of the real FAQs (no network,
no ../shared, no packages).

Snippet licences: perlfaq4/perlfaq5 (perl-doc 5.36) "Copyright (c) 1997-2010 Tom Christiansen,
Nathan Torkington, and other authors as noted. [...] This documentation is free; you can
redistribute it and/or modify it under the same terms as Perl itself" (GPL-1+ or Artistic), its
code examples public domain; gitfaq.txt (git-doc 2.39) GPL-2; SQLite's faq.html public domain.
"""
import json

from bench import faq_devsets as F
from transforms.evaluation.datasets import load_dataset

PERLFAQ = """\
=head1 Data: Numbers

=head2 Why is int() broken?

Your C<int()> is most probably working just fine. It's the numbers that
aren't quite what you think.

    print int(0.6/0.2-2), "\\n";

=head2 How do I convert between numeric representations/bases/radixes?

Some of the examples later in L<perlfaq4> use the L<Bit::Vector>
module from CPAN.

Using C<sprintf>:

    my $hex = sprintf("%X", 3735928559); # upper case A-F

=head2 How can I copy a file?
X<copy> X<file, copy> X<File::Copy>

Use the L<File::Copy> module. It comes with Perl and can do a
true copy across file systems. See also L<< C<open>|perlfunc/open >>
and L<perlop/"Quote and Quote-like Operators">, or L<the web|https://perl.org>.

=head2 What is a JAPH?

A JAPH is a signature: "Just another Perl hacker,".

=head1 AUTHOR AND COPYRIGHT
"""

PERLFUNC = """\
=head2 Alphabetical Listing of Perl Functions

=item int EXPR

=item open FILEHANDLE,MODE,EXPR

=item print LIST

=item sprintf FORMAT, LIST

=item s///
"""

GITFAQ = """\
gitfaq(7)
=========

NAME
----
gitfaq - Frequently asked questions about using Git

Configuration
-------------

[[user-name]]
What should I put in `user.name`?::
\tYou should put your personal name, generally a form using a given name
\tand family name.
+
This configuration doesn't have any effect on authenticating to remote services;
for that, see `credential.username` in linkgit:git-config[1].

Common Issues
-------------

[[ignore-tracked-files]]
How do I ignore changes to a tracked file?::
\tGit doesn't provide a way to do this.  The reason is that if Git needs
\tto overwrite this file, such as during a checkout, it doesn't know whether
\tthe changes to the file are precious.
+
If what you want to do is to stop tracking a file, you can use
`git rm --cached` and then add the path to the `.gitignore` file.

[[fetching-and-pulling]]
How do I know if I want to do a fetch or a pull?::
\tA fetch stores a copy of the latest changes from the remote
\trepository, without modifying the working tree.
"""

SQLITEFAQ = """\
<a name="q1"></a>
<p><b>(1) How do I create an AUTOINCREMENT field?</b></p>
<blockquote><p>Short answer: A column declared <a href="lang_createtable.html#rowid">INTEGER PRIMARY KEY</a> will
  autoincrement.</p>
  <p>There is a function named
  <a href="c3ref/last_insert_rowid.html">sqlite3_last_insert_rowid()</a> which will return the integer key
  for the most recent insert operation.</p></blockquote></li>
<a name="q2"></a>
<p><b>(2) What datatypes does SQLite support?</b></p>
<blockquote>SQLite uses <a href="datatype3.html">dynamic typing</a>.  See <a href="https://sqlite.org">the site</a>.</blockquote></li>
"""


def test_pod_codes_and_links():
    assert F.pod_codes("L<File::Copy> and L<< C<open>|perlfunc/open >>", "L") == ["File::Copy", "C<open>|perlfunc/open"]
    assert F.pod_codes("L<C<sprintf>|perlfunc/sprintf>", "L") == ["C<sprintf>|perlfunc/sprintf"]
    assert F.link_target("C<open>|perlfunc/open") == ("perlfunc", "open")
    assert F.link_target('perlop/"Quote and Quote-like Operators"') == ("perlop", "Quote and Quote-like Operators")
    assert F.link_target("the web|https://perl.org") is None
    assert F.link_target('/"Same page"') is None
    assert F.pod_plain("Why is C<int()> broken? L<File::Copy>") == "Why is int() broken? File::Copy"


def test_perlfaq_questions_gold_and_phrases():
    builtins = F.perlfunc_names(PERLFUNC)
    assert {"int", "open", "print", "sprintf", "s"} <= builtins
    qs = F.perlfaq_questions(PERLFAQ, "perlfaq4", builtins)
    assert [q["question"] for q in qs] == [
        "Why is int() broken?", "How do I convert between numeric representations/bases/radixes?",
        "How can I copy a file?", "What is a JAPH?"]
    copy = qs[2]
    assert [n for n, _ in copy["links"]] == ["File::Copy", "perlfunc", "perlop"]
    assert copy["phrases"] == ["File::Copy", "open"]
    keys = {"File::Copy": "man3/File-Copy.3perl", "perlfunc": "man1/perlfunc.1", "perlop": "man1/perlop.1"}
    # link rule: the linked pages in the corpus (the FAQ page itself and CPAN-only modules are not)
    assert F.perl_gold(copy, keys) == (["man3/File-Copy.3perl", "man1/perlfunc.1", "man1/perlop.1"], "link")
    # perlfaq4 and Bit::Vector are not in the corpus: no link gold, so the code rule
    assert qs[1]["phrases"] == ["Bit::Vector", "sprintf"]
    assert F.perl_gold(qs[1], keys) == (["man1/perlfunc.1"], "code")
    # code rule, only without links: a builtin named in code form -> perlfunc
    assert qs[0]["phrases"] == ["int"]
    assert F.perl_gold(qs[0], keys) == (["man1/perlfunc.1"], "code")
    assert F.perl_gold(qs[3], keys) == ([], "")


def test_gitfaq_questions_gold_and_split():
    qs = F.gitfaq_questions(GITFAQ)
    assert [(q["section"], q["question"]) for q in qs] == [
        ("Configuration", "What should I put in user.name?"),
        ("Common Issues", "How do I ignore changes to a tracked file?"),
        ("Common Issues", "How do I know if I want to do a fetch or a pull?")]
    pages = {"git-config", "git-rm", "gitignore", "git-fetch"}
    config_text = "credential.username The username ... user.name"
    assert F.gitfaq_gold(qs[0], pages, config_text) == (["git-config"], ["git config", "credential.username"])
    assert F.gitfaq_gold(qs[1], pages, config_text) == (["git-rm", "gitignore"], ["git rm", ".gitignore"])
    assert F.gitfaq_gold(qs[2], pages, config_text) == ([], [])  # no reference: dropped
    assert F.alternate_split(q["section"] for q in qs) == {"Configuration": "tune", "Common Issues": "eval"}


def test_sqlitefaq_questions():
    qs = F.sqlitefaq_questions(SQLITEFAQ)
    assert [(q["n"], q["question"]) for q in qs] == [
        (1, "How do I create an AUTOINCREMENT field?"), (2, "What datatypes does SQLite support?")]
    assert qs[0]["links"] == ["lang_createtable.html", "c3ref/last_insert_rowid.html"]
    assert qs[0]["phrases"] == ["INTEGER PRIMARY KEY", "sqlite3_last_insert_rowid"]
    assert qs[1]["links"] == ["datatype3.html"] and qs[1]["phrases"] == []


def test_write_set_reads_back_per_split(tmp_path):
    out = tmp_path / "set"
    (out / "docs").mkdir(parents=True)
    (out / "docs" / "a.txt").write_text("alpha")
    licence = tmp_path / "copyright"
    licence.write_text("GPL-2")
    items = [
        {"id": "tune-x-0", "question": "How do I alpha?", "split": "tune", "source": "x", "gold": ["a.txt"],
         "phrases": ["alpha"]},
        {"id": "eval-x-1", "question": "How do I beta?", "split": "eval", "source": "x", "gold": ["a.txt"],
         "phrases": []},
    ]
    s = F.write_set(out, "x", items, "# x", str(licence))
    assert (s["questions"], s["tune"], s["eval"], s["documents"], s["with_phrases"]) == (2, 1, 1, 1, 1)
    ds = load_dataset(str(out))
    assert set(ds.queries) == {"tune-x-0", "eval-x-1"} and ds.answers == {"tune-x-0": ["alpha"]}
    assert ds.corpus == str(out / "docs")
    ev = load_dataset(str(out), qrels=str(out / "qrels" / "eval.tsv"))
    assert set(ev.queries) == {"eval-x-1"}
    meta = [json.loads(l)["metadata"] for l in (out / "queries.jsonl").read_text().splitlines()]
    assert [m["split"] for m in meta] == ["tune", "eval"]
