"""Every label of a page's SVGs as a real browser lays it out (getBBox, in each SVG's own units), and
what is wrong with them: two labels that intersect, a label that leaves its SVG's viewBox, a mark's
tick that runs through another mark's label. For the drill report's browser test."""

from __future__ import annotations

import html
import itertools
import json
import re
from pathlib import Path
from typing import Any

from tests.support.browser import open_in_chromium

# Run once the page has loaded; it writes what it measured into the DOM, which --dump-dom prints.
MEASURE = """<script>
(() => {
  const out = [];
  for (const svg of document.querySelectorAll("svg")) {
    const vb = svg.viewBox.baseVal;
    const texts = [...svg.querySelectorAll("text")].map((t) => {
      const b = t.getBBox();
      return { text: t.textContent, cls: t.getAttribute("class") || "", x: b.x, y: b.y, w: b.width, h: b.height };
    });
    const lines = [...svg.querySelectorAll("line.mark")].map((l) => ({
      x: l.x1.baseVal.value, y1: l.y1.baseVal.value, y2: l.y2.baseVal.value,
    }));
    out.push({ id: svg.id, viewBox: [vb.x, vb.y, vb.width, vb.height], texts, lines });
  }
  const pre = document.createElement("pre");
  pre.id = "measured-labels";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""

EPSILON = 0.01  # px: boxes that only touch do not intersect


def measure(page_html: str, folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The SVGs' labels and tick lines as Chromium laid them out, and the console's messages."""
    page = folder / "measured.html"
    page.write_text(page_html.replace("</body>", MEASURE + "</body>"))
    dom, console = open_in_chromium(page, folder / "profile")
    found = re.search(r'<pre id="measured-labels">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, dom[-2000:]
    return json.loads(html.unescape(found.group(1))), console


def _apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["x"] + a["w"] <= b["x"] + EPSILON
        or b["x"] + b["w"] <= a["x"] + EPSILON
        or a["y"] + a["h"] <= b["y"] + EPSILON
        or b["y"] + b["h"] <= a["y"] + EPSILON
    )


def faults(svgs: list[dict[str, Any]]) -> list[str]:
    """One line per fault, naming the SVG and the labels."""
    found: list[str] = []
    for svg in svgs:
        x0, y0, width, height = svg["viewBox"]
        texts = svg["texts"]
        for t in texts:
            if (
                t["x"] < x0 - EPSILON
                or t["y"] < y0 - EPSILON
                or t["x"] + t["w"] > x0 + width + EPSILON
                or (t["y"] + t["h"] > y0 + height + EPSILON)
            ):
                found.append(f"{svg['id']}: {t['text']!r} at {_box(t)} leaves the viewBox {svg['viewBox']}")
        for a, b in itertools.combinations(texts, 2):
            if not _apart(a, b):
                found.append(f"{svg['id']}: {a['text']!r} at {_box(a)} intersects {b['text']!r} at {_box(b)}")
        for line in svg["lines"]:
            for t in texts:
                across = t["x"] + EPSILON < line["x"] < t["x"] + t["w"] - EPSILON
                if t["cls"] == "mark" and across and line["y1"] < t["y"] + t["h"] and line["y2"] > t["y"]:
                    found.append(f"{svg['id']}: the tick at x={line['x']:.1f} runs through {t['text']!r}")
    return found


def _box(t: dict[str, Any]) -> str:
    return f"({t['x']:.1f}, {t['y']:.1f}, {t['w']:.1f}x{t['h']:.1f})"
