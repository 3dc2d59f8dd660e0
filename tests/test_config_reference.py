"""docs/configuration-reference.md is generated from configs/schema.py: the committed page must
be what the schema renders today, and every key must say what it means."""
import yaml

from configs import reference
from configs.schema import DEFAULT_CONFIG, Config
from transforms.common.redact import SECRET_KEYS


def test_the_committed_page_is_what_the_schema_renders():
    assert reference.PAGE.read_text(encoding="utf-8") == reference.render(), \
        "docs/configuration-reference.md is out of date: run `python -m configs.reference` (make docs)"


def test_every_key_has_a_type_a_default_and_a_meaning():
    missing = [k["path"] for k in reference.keys() if not k["meaning"].strip()]
    assert not missing, f"add a Field(description=...) in configs/schema.py for: {missing}"
    assert all(k["type"] and k["default"] for k in reference.keys())


def test_every_section_has_a_line_saying_what_it_is():
    assert all(doc for _, doc in reference._sections())


def test_secrets_have_no_default_but_null_and_are_marked():
    rows = {k["path"]: k for k in reference.keys()}
    for path in (".".join(p) for p in SECRET_KEYS):
        assert rows[path]["secret"] and rows[path]["default"] == "null", path
        assert f"| `{path}` | string or null | `null` | *secret*;" in reference.render()


def test_a_secret_default_would_not_be_printed(monkeypatch):
    """Even if the schema gave a secret a default, the page shows null."""
    field = Config.model_fields["s3"].annotation.model_fields["secret_access_key"]
    monkeypatch.setattr(field, "default", "hunter2")
    assert "hunter2" not in reference.render()


def test_every_key_of_the_default_config_is_on_the_page():
    paths = {k["path"] for k in reference.keys()}

    def walk(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and path not in paths:
                yield from walk(value, path + ".")
            else:
                yield path

    default_keys = set(walk(yaml.safe_load(DEFAULT_CONFIG.read_text())))
    assert default_keys and default_keys <= paths, default_keys - paths


def test_the_page_says_how_to_override_a_key_from_the_environment():
    page = reference.render()
    assert "RAGBEAM__SECTION__KEY" in page and "${VAR}" in page


def test_check_mode_reports_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "ref.md"
    stale.write_text("old\n")
    assert reference.main(["--check", "--out", str(stale)]) == 1
    assert reference.main(["--out", str(stale)]) == 0 and reference.main(["--check", "--out", str(stale)]) == 0


def test_the_user_section_is_about_twenty_documented_keys_and_comes_first():
    users = reference.user_keys()
    assert 15 <= len(users) <= 25, [k["path"] for k in users]
    undocumented = [k["path"] for k in users if len(k["meaning"].split()) < 3]
    assert not undocumented, f"describe these user keys in configs/schema.py: {undocumented}"
    page = reference.render()
    user_part, expert_part = page.split("\n## User settings\n")[1].split("\n## Expert settings\n")
    for k in reference.keys():
        row = f"| `{k['path']}` |"
        assert (row in user_part, row in expert_part) == (k["user"], not k["user"]), k["path"]
    # every section keeps its heading (docs link to #runner, #s3, ...), its user keys named there
    assert all(f"### `{section}`" in expert_part for section, _ in reference._sections())
