"""Reports: the text table, Markdown, the chart, JSON and progress lines."""

from __future__ import annotations

# What a report can be rendered as on standard output (`perfgate report` and `compare --format`), here so that
# the CLI's parser names them without importing the renderers.
FORMATS = ("text", "markdown", "json")
