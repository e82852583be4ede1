"""The README and the docs site: the README stays a front page whose links resolve and whose test command is
CI's; the recipe-keys page is what docs/gen_recipe_keys.py makes of recall_cli/recipe/; every command line
in the README and the docs names a command, options and recipe keys that exist; the API page covers
recall_cli.__all__; and (slow) the site builds with mkdocs --strict, where a broken link or anchor fails."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

from recall_cli.rundir import SEQUENCE_DEFAULTS as CONTINUAL_KEYS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def generator():
    spec = importlib.util.spec_from_file_location("gen_recipe_keys", DOCS / "gen_recipe_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slug(heading: str) -> str:
    """Python-Markdown's toc slug of a heading (what mkdocs and the links here use as anchors)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.MULTILINE)}


def markdown_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


# ---- the README -----------------------------------------------------------------------------------


def test_readme_is_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail to a docs page"
    quick = README.read_text(encoding="utf-8").split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert len(quick.strip().splitlines()) <= 15


def test_every_relative_link_in_the_readme_exists():
    text = README.read_text(encoding="utf-8")
    links = LINK.findall(text)
    assert links
    for target in links:
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, fragment = target.partition("#")
        assert (REPO / path).exists(), f"README.md links to {target}, which does not exist"
        if fragment and path.endswith(".md"):
            assert fragment in anchors(REPO / path), f"README.md links to {target}: no such heading there"


def test_the_readme_test_command_is_ci_s():
    """CI (.ci/run -> make test) runs exactly the README's test command, under a Development heading."""
    text = README.read_text(encoding="utf-8")
    development = text.split("\n## Development\n", 1)[1].split("\n## ", 1)[0]
    assert "```bash\npython -m pytest -q\n```" in development
    assert '`python -m pytest -q -m "not slow"`' in development
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test: .*\n\t\$\(ACTIVATE\) python -m pytest -q\n", makefile, flags=re.MULTILINE)
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_library_examples_are_in_the_readme_once_and_the_docs_include_them():
    """tests/test_library.py runs the README's sections; docs/library.md includes them by snippet section."""
    text = README.read_text(encoding="utf-8")
    library = (DOCS / "library.md").read_text(encoding="utf-8")
    for heading, section in (("RecAdam in your own training loop", "recadam-loop"),
                             ("Methods in your own training loop", "methods-loop")):
        body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
        assert f"[start:{section}]" in body and f"[end:{section}]" in body
        assert len(re.findall(r"```python\n", body)) == 2
        assert f'--8<-- "README.md:{section}"' in library


# ---- the docs site --------------------------------------------------------------------------------


def test_the_recipe_keys_page_is_generated_from_the_schema():
    """docs/recipe-keys.md is what docs/gen_recipe_keys.py writes from recall_cli/recipe/ (after changing
    the recipe's fields or checks: python docs/gen_recipe_keys.py)."""
    from recall_cli.recipe import all_keys

    gen = generator()
    committed = (DOCS / "recipe-keys.md").read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/recipe-keys.md is stale: run python docs/gen_recipe_keys.py"
    for key in all_keys():
        assert f"| `{key}` |" in committed, key


def test_the_recipe_key_checks_are_found():
    """The generator reads the checks from the code: a sample of them, as the recipe reports them."""
    found = generator().checks()
    assert "must be > 0" in found["optimizer.lr"]
    assert any("a step count" in c for c in found["optimizer.anneal_t0"])
    assert found["train.log_every"] == ["must be >= 1"]
    assert any("required for a custom task" in c for c in found["task.label_field"])
    assert any("LoRA" in c for c in found["model.lora.r"])


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_in_the_nav_exists_and_every_new_page_is_in_it():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = nav_pages(config["nav"])
    for page in pages:
        assert (DOCS / page).is_file(), page
    outside = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} - set(pages)
    assert all(p.startswith("study/") for p in outside), f"pages outside the nav: {sorted(outside)}"


def test_the_api_page_documents_every_public_name():
    import recall_cli

    api = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in recall_cli.__all__:
        if name == "__version__":
            assert "__version__" in api
            continue
        assert f"::: {recall_cli._HOMES[name]}.{name}\n" in api, name


def test_relative_links_in_the_docs_point_at_files():
    """The fast half of the strict build: each relative link of a page names a file (folders too)."""
    for page in markdown_pages()[1:]:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.partition("#")[0]
            assert (page.parent / path).exists(), f"{page.relative_to(REPO)} links to {target}"


# ---- command lines in the README and the docs -----------------------------------------------------


def command_lines() -> list[tuple[str, str]]:
    """(page, line) for each `recall ...`, `make ...` or `python <script>` line of a bash block."""
    found = []
    for page in markdown_pages():
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            if lang not in ("bash", "sh", "console"):
                continue
            joined = re.sub(r"\\\n\s*", " ", body)
            for line in joined.splitlines():
                line = re.sub(r"^\$ ", "", line.strip())
                if re.match(r"^(recall|make|python) ", line):
                    found.append((str(page.relative_to(REPO)), line))
    return found


def test_every_command_line_names_a_command_options_and_keys_that_exist():
    import typer.main

    from recall_cli.cli import app
    from recall_cli.recipe import all_keys

    group = typer.main.get_command(app)
    keys = set(all_keys())
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(encoding="utf-8"), flags=re.MULTILINE))
    lines = command_lines()
    assert len(lines) > 40
    for page, line in lines:
        words = shlex.split(line, comments=True)
        where = f"{page}: {line}"
        if words[0] == "make":
            assert words[1] in targets, where
            continue
        if words[0] == "python":
            if words[1] not in ("-m", "-c"):
                assert (REPO / words[1]).is_file(), where
            continue
        if words[1].startswith("-"):
            continue  # recall --help, --version
        assert words[1] in group.commands, where
        command = group.commands[words[1]]
        options = {o for p in command.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
                   if o.startswith("-")}
        previous = None
        for word in words[2:]:
            if word.startswith("-"):
                assert word.split("=")[0] in options, f"{where}: no option {word}"
            elif "=" in word and not word.startswith("$") and (previous in ("--grid", "--where") or (
                    previous is None or not previous.startswith("--")) and words[1] in ("finetune", "sweep")):
                key = word.split("=")[0]
                sequence = words[1] == "sweep" and key.startswith("continual.")  # a sweep of sequences: their own keys
                assert (key.split(".")[1] in CONTINUAL_KEYS) if sequence else key in keys, f"{where}: no recipe key {key}"
            previous = word


def test_every_command_has_a_row_in_the_readme_and_a_docs_page():
    import typer.main

    from recall_cli.cli import app

    text = README.read_text(encoding="utf-8")
    table = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    pages = "".join(p.read_text(encoding="utf-8") for p in sorted((DOCS / "commands").glob("*.md")))
    for name in typer.main.get_command(app).commands:
        assert f"| `recall {name}" in table, f"recall {name} has no row in the README's command table"
        assert f"# recall {name}" in pages or f"## recall {name}" in pages, f"recall {name} has no docs page"


# ---- the strict build -----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra installs mkdocs (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="the docs extra installs mkdocs-material")
    pytest.importorskip("mkdocstrings", reason="the docs extra installs mkdocstrings[python]")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=REPO, capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (tmp_path / "site" / "recipe-keys" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="recall_cli.api.recadam_for"' in api and 'id="recall_cli.optim.RecAdam"' in api
