"""HTML to readable text for `web_fetch`, with the stdlib's `html.parser`. Stdlib only.

Drops scripts, styles and other non-content elements; keeps paragraphs, headings, list items,
table rows and link targets (`[text](href)`). A reader's view, not a renderer: no CSS, no layout.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

_SKIP = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas"}
)
_PARAGRAPH = frozenset(
    {"p", "pre", "blockquote", "table", "dl", "figure", "form", "fieldset", "hr",
     "section", "article", "header", "footer", "main", "nav", "aside", "details", "address"}
)  # fmt: skip
_LINE = frozenset(
    {"br", "div", "li", "tr", "dt", "dd", "figcaption", "caption", "summary", "option", "label"}
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LINK_SCHEMES = ("http://", "https://", "mailto:", "ftp://")


class _Reader(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.title = ""
        self._out: list[str] = []
        self._pending = 0  # newlines owed before the next text
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._lists = 0
        self._cells = False
        self._links: list[tuple[str, int]] = []

    def _write(self, text: str, *, raw: bool = False) -> None:
        if self._pending:
            if self._out:
                self._out[-1] = self._out[-1].rstrip(" ")
                self._out.append("\n" * self._pending)
            self._pending = 0
        if not raw and not self._pre:
            at_line_start = not self._out or self._out[-1].endswith(("\n", " "))
            text = text.lstrip(" ") if at_line_start else text
        if text:
            self._out.append(text)

    def _break(self, newlines: int) -> None:
        if self._out:
            self._pending = max(self._pending, newlines)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "base":
            href = dict(attrs).get("href")
            self.base_url = urljoin(self.base_url, href) if href else self.base_url
        else:
            self._open_block(tag)
            self._open_inline(tag, attrs)

    def _open_block(self, tag: str) -> None:
        if tag in ("ul", "ol"):
            self._break(1 if self._lists else 2)
            self._lists += 1
        elif tag in _PARAGRAPH or tag in _HEADINGS:
            self._break(2)
        elif tag in _LINE:
            self._break(1)
        if tag == "pre":
            self._pre += 1
        elif tag == "tr":
            self._cells = False

    def _open_inline(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._links.append((dict(attrs).get("href") or "", len(self._out)))
        elif tag in _HEADINGS:
            self._write("#" * _HEADINGS[tag] + " ", raw=True)
        elif tag == "li":
            self._write("  " * max(self._lists - 1, 0) + "- ", raw=True)
        elif tag in ("td", "th"):
            if self._cells:
                self._write(" | ", raw=True)
            self._cells = True

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(self._skip - 1, 0)
        elif tag == "title":
            self._in_title = False
        elif tag == "a" and self._links:
            self._close_link(*self._links.pop())
        elif tag in ("ul", "ol"):
            self._lists = max(self._lists - 1, 0)
            self._break(1 if self._lists else 2)
        elif tag == "pre":
            self._pre = max(self._pre - 1, 0)
        if tag in _PARAGRAPH or tag in _HEADINGS:
            self._break(2)
        elif tag in _LINE:
            self._break(1)

    def _close_link(self, href: str, start: int) -> None:
        text = " ".join("".join(self._out[start:]).split())
        target = urljoin(self.base_url, href.strip()) if href.strip() else ""
        if not text or not target.startswith(_LINK_SCHEMES) or href.startswith("#"):
            return
        self._out[start:] = [text if text == target else f"[{text}]({target})"]

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title += data
        elif self._pre:
            self._write(data)
        else:
            self._write(re.sub(r"\s+", " ", data))

    def text(self) -> str:
        joined = "".join(self._out)
        return re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", joined)).strip()


def html_to_text(html: str, base_url: str) -> tuple[str, str]:
    """`(title, text)` of an HTML document; links are resolved against `base_url`."""
    reader = _Reader(base_url)
    reader.feed(html)
    reader.close()
    return " ".join(reader.title.split()), reader.text()
