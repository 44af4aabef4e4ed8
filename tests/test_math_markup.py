"""LaTeX in sample texts becomes MathML; everything else, hostile input included, is text."""

from __future__ import annotations

from builders.publish.math_markup import render_math


def test_inline_and_display_math_become_mathml_and_the_rest_is_escaped() -> None:
    html = str(render_math(r"Compute $2^{3}$ and \[\frac{a}{b}\] for <b>x</b> & y"))
    assert html.startswith("Compute <math") and "<msup><mn>2</mn>" in html
    assert 'display="block"' in html and "<mfrac>" in html
    assert html.endswith(" for &lt;b&gt;x&lt;/b&gt; &amp; y")
    assert "<mo>≤</mo>" in str(render_math(r"\(a \leq b\)"))  # symbols as characters


def test_dollars_that_are_money_and_math_that_does_not_parse_stay_text() -> None:
    assert str(render_math("It costs $5 and $10 more.")) == "It costs $5 and $10 more."
    assert str(render_math(r"$\frac{a}{$ is cut")) == r"$\frac{a}{$ is cut"


def test_a_hostile_row_cannot_inject_markup_or_links_through_math() -> None:
    html = str(render_math(r"$\text{<script>alert(1)</script>}$ $\href{javascript:alert(1)}{x}$"))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "href" not in html and "javascript" not in html
    assert "<img" not in str(render_math(r"$\text{<img src=x onerror=alert(1)>}$"))
