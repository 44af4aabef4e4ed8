"""LaTeX math in sample texts, rendered as MathML (browsers draw it natively: no script, no
network, nothing for the viewer's Content-Security-Policy to allow).

`$...$` (pandoc's rule: no space just inside the dollars, no digit right after the closing
one, so "$5 and $10" stays text), `\\(...\\)`, `$$...$$` and `\\[...\\]` are converted by
latex2mathml; everything else is escaped. A row is untrusted input: the MathML is rebuilt
from latex2mathml's element tree with its text escaped and only presentation attributes
kept (no `href`), and math that does not parse stays as its source text.
"""

from __future__ import annotations

import html
import re
from xml.etree.ElementTree import tostring

from latex2mathml.converter import convert_to_element
from markupsafe import Markup, escape

MATH = re.compile(
    r"\$\$(?P<block>.+?)\$\$"
    r"|\\\[(?P<bracket>.+?)\\\]"
    r"|\\\((?P<paren>.+?)\\\)"
    r"|(?<![\\$])\$(?!\s)(?P<inline>[^$\n]+?)(?<![\s\\])\$(?!\d)",
    re.S,
)
ATTRIBUTES = frozenset(
    {
        "xmlns", "display", "mathvariant", "stretchy", "fence", "separator", "lspace",
        "rspace", "columnalign", "columnspacing", "rowspacing", "columnlines", "rowlines",
        "minsize", "maxsize", "accent", "accentunder", "movablelimits", "linethickness",
        "width", "height", "depth", "form", "symmetric", "largeop", "scriptlevel",
        "displaystyle", "mathsize", "notation", "frame", "framespacing", "align",
    }
)  # fmt: skip
"""MathML presentation attributes kept; any other (a link, an event handler) is dropped."""


def mathml(latex: str, display: bool = False) -> str | None:
    """`latex` as a MathML element's markup, or None when it does not parse."""
    try:
        root = convert_to_element(latex, display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - any parse failure: the text stays as written
        return None
    for element in root.iter():
        element.attrib = {k: v for k, v in element.attrib.items() if k in ATTRIBUTES}
        # latex2mathml writes symbols as character references: make them characters, so
        # that serializing escapes exactly what must be escaped
        element.text = html.unescape(element.text) if element.text else element.text
        element.tail = html.unescape(element.tail) if element.tail else element.tail
    return tostring(root, encoding="unicode")


def render_math(text: str) -> Markup:
    """`text` escaped for HTML, its LaTeX math as MathML."""
    parts: list[str] = []
    pos = 0
    for match in MATH.finditer(text):
        display = match.group("block") is not None or match.group("bracket") is not None
        latex = next(g for g in match.group("block", "bracket", "paren", "inline") if g)
        rendered = mathml(latex, display)
        parts.append(escape(text[pos : match.start()]))
        parts.append(Markup(rendered) if rendered is not None else escape(match.group(0)))
        pos = match.end()
    parts.append(escape(text[pos:]))
    return Markup("").join(parts)
