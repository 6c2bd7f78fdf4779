"""Check the built documentation site as a person would see it (``make docs-check``).

1. Every local link and image of every page points at a file of the site (and an anchor it has).
2. Headless Chromium (Debian's ``chromium``) renders the home page and one API page: each must show its
   title and key text in the rendered DOM, and its screenshot must not be blank.

Usage: ``python scripts/check_docs.py docs/_build/html [--shots DIR]``. Exit status 1 names each
broken page or link.
"""

from __future__ import annotations

import argparse
import html.parser
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

# The pages rendered, and text each must show once rendered (not just in its source).
RENDERED = {
    "index.html": ["gpcnn", "Does it converge?", "make demo", "User guide"],
    "generated/gpcnn.GreenplumCNN.html": ["GreenplumCNN", "Parameters", "fit", "predict"],
}


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])
        for name in ("href", "src"):
            if found.get(name) and tag in ("a", "img", "link", "script"):
                self.links.append(found[name])


def _parsed(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(errors="replace"))
    return parser


def broken_links(site: Path) -> list[str]:
    """Local links and images of every page that point at no file, or at an anchor the page lacks."""
    # _static holds the theme's own templates, not pages.
    pages = {p: _parsed(p) for p in site.rglob("*.html") if "_static" not in p.parts}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parsed(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    return broken


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    sys.exit("check_docs: no Chromium found: apt-get install chromium (Debian's package)")


def _blank(png: Path) -> bool:
    """A screenshot with (almost) one colour: nothing was drawn."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    return float(pixels[..., :3].std()) < 0.02


def rendering_problems(site: Path, shots: Path) -> list[str]:
    """Render each page of RENDERED in headless Chromium; what it fails to show."""
    browser = _chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    problems = []
    for name, expected in RENDERED.items():
        url = (site / name).resolve().as_uri()
        dom = subprocess.run(
            [browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120
        ).stdout
        shown = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", dom))  # the text, without markup
        missing = [text for text in expected if text not in shown]
        if missing:
            problems.append(f"{name}: the rendered page lacks {missing}")
        png = shots / (name.replace("/", "_") + ".png")
        subprocess.run(
            [browser, *flags, "--window-size=1280,1600", f"--screenshot={png}", url],
            capture_output=True,
            timeout=120,
        )
        if not png.exists() or _blank(png):
            problems.append(f"{name}: the screenshot is blank or missing ({png})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. docs/_build/html")
    parser.add_argument("--shots", type=Path, help="keep the screenshots here")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        sys.exit(f"check_docs: {args.site} holds no index.html: run make docs first")
    with tempfile.TemporaryDirectory() as tmp:
        shots = args.shots or Path(tmp)
        shots.mkdir(parents=True, exist_ok=True)
        problems = broken_links(args.site) + rendering_problems(args.site, shots)
    for problem in problems:
        print(f"check_docs: {problem}", file=sys.stderr)
    pages = sum("_static" not in p.parts for p in args.site.rglob("*.html"))
    print(f"check_docs: {pages} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
