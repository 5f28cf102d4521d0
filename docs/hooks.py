"""mkdocs hooks: pages that are written from their one source at every build.

- the home page is the repository's README (its links into ``docs/`` made relative to the site);
- the command reference is every command's own ``--help``, asked of the installed command line.
"""

from __future__ import annotations

from pathlib import Path

README = "<!-- README.md -->"
COMMANDS = "<!-- burst --help, every command -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if README in markdown:
        readme = (Path(config["docs_dir"]).parent / "README.md").read_text()
        markdown = markdown.replace(README, readme.replace("](docs/", "]("))
    if COMMANDS in markdown:
        from burst.cli.reference import burst_reference

        markdown = markdown.replace(COMMANDS, burst_reference())
    return markdown
