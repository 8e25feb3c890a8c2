"""Render a perfgate Markdown report as a pull-request comment would show it, and screenshot it.

    python docs/render_comment.py report.md docs/pr-comment.png

The Markdown is the file `perfgate check --markdown` wrote in a real check. It is rendered with
markdown-it-py (tables and the report's HTML, `<details>` included), styled close to GitHub's comment
view, and photographed by headless Chromium. Nothing is fetched.
"""

from __future__ import annotations

import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from markdown_it import MarkdownIt

STYLE = """
body { font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; color: #1f2328;
       background: #fff; margin: 0; padding: 16px; }
.comment { border: 1px solid #d1d9e0; border-radius: 6px; max-width: 1040px; }
.header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px; color: #59636e;
          border-radius: 6px 6px 0 0; }
.header b { color: #1f2328; }
.body { padding: 16px; }
h1, h2, h3 { border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; margin-top: 8px; }
h3 { border: 0; font-size: 1.25em; }
table { border-collapse: collapse; margin: 8px 0 16px; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
th { font-weight: 600; background: #f6f8fa; }
tr:nth-child(2n) td { background: #f6f8fa; }
code { font: 85% ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eff1f3; padding: .2em .4em;
       border-radius: 6px; }
pre { background: #f6f8fa; padding: 16px; border-radius: 6px; overflow: auto; }
pre code { background: none; padding: 0; }
details { margin: 8px 0; } summary { cursor: pointer; }
"""


def page(markdown: str, title: str) -> str:
    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><div class='comment'><div class='header'><b>github-actions</b> "
        f"bot commented</div><div class='body'>{body}</div></div></body></html>"
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python docs/render_comment.py REPORT.md OUT.png", file=sys.stderr)
        return 2
    source, out = Path(argv[0]), Path(argv[1])
    browser = next((p for name in ("chromium", "chromium-browser") if (p := shutil.which(name))), None)
    if browser is None:
        print("error: no chromium on PATH; install Debian's chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        html_path = Path(folder) / "comment.html"
        html_path.write_text(page(source.read_text(encoding="utf-8"), source.name), encoding="utf-8")
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        command += ["--window-size=1100,1300", f"--screenshot={out.resolve()}", html_path.as_uri()]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
