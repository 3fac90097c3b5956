"""Reading an invoice or credit-note PDF as a viewer shows it: its text per
page (PDFium, the renderer Chrome uses) and the boxes of its characters, for
the PDF tests in English and in Chinese."""

from __future__ import annotations

import pypdfium2 as pdfium

from console.kernel.money import format_amount
from invoicing.money import from_minor

SELLER = {
    "name": "Token Billing GmbH",
    "address": "Friedrichstraße 1\n10117 Berlin\nGermany",
    "tax_id": "DE123456789",
    "email": "billing@example.com",
}


def pages(pdf: bytes) -> list[str]:
    doc = pdfium.PdfDocument(pdf)
    return [doc[i].get_textpage().get_text_range() for i in range(len(doc))]


def flat(text: str) -> str:
    """The text with line breaks and runs of spaces as single spaces."""
    return " ".join(text.split())


def minor(amount_minor: int, currency: str) -> str:
    return format_amount(from_minor(amount_minor, currency), currency)


def box(textpage, needle: str) -> tuple[float, float, float, float]:
    """The union of the character boxes of the first occurrence of ``needle``
    (left, bottom, right, top in PDF points)."""
    searcher = textpage.search(needle, match_case=True, match_whole_word=False)
    found = searcher.get_next()
    assert found is not None, f"{needle!r} is not on the page"
    start, count = found
    rects = [textpage.get_charbox(i) for i in range(start, start + count)]
    rects = [r for r in rects if r[2] > r[0]]  # spaces have empty boxes
    return (
        min(r[0] for r in rects),
        min(r[1] for r in rects),
        max(r[2] for r in rects),
        max(r[3] for r in rects),
    )


def union(boxes):
    boxes = list(boxes)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def intersects(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def header_blocks(
    textpage,
    *,
    title: str,
    status: str,
    number_and_dates: list[str],
    seller: list[str],
    buyer: list[str],
) -> dict[str, tuple[float, float, float, float]]:
    """The first page's header blocks, each the union of its texts' boxes."""
    return {
        "title": box(textpage, title),
        "status": box(textpage, status),
        "number and dates": union([box(textpage, s) for s in number_and_dates]),
        "seller": union(box(textpage, s) for s in seller),
        "buyer": union(box(textpage, s) for s in buyer),
    }


def assert_apart(blocks: dict[str, tuple[float, float, float, float]]) -> None:
    """No two header blocks overlap; the title is above the parties, the
    seller left of the buyer."""
    names = list(blocks)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not intersects(blocks[a], blocks[b]), f"{a} overlaps {b}"
    assert blocks["title"][1] > blocks["seller"][3]
    assert blocks["seller"][2] < blocks["buyer"][0]
