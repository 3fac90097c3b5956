"""A small PDF writer: pages of text in the standard Helvetica fonts (no
embedded fonts, no dependencies). Enough for an invoice a finance team can
send: positioned text, bold headings, rules."""

from __future__ import annotations

import zlib

PAGE_W, PAGE_H = 595, 842  # A4 in points


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252", errors="replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def text_width(text: str, size: float) -> float:
    """A close estimate of Helvetica's width (for right-aligned numbers)."""
    narrow = set("il.,:;!|'ftjr ")
    wide = set("mwMW@%")
    units = sum(0.28 if c in narrow else 0.83 if c in wide else 0.56 for c in text)
    return units * size


class Page:
    def __init__(self) -> None:
        self.ops: list[bytes] = []

    def text(self, x: float, y: float, s: str, *, size: float = 9, bold: bool = False) -> None:
        font = b"F2" if bold else b"F1"
        self.ops.append(b"BT /%s %.1f Tf %.2f %.2f Td (%s) Tj ET" % (font, size, x, y, _escape(s)))

    def text_right(self, x: float, y: float, s: str, *, size: float = 9, bold: bool = False):
        self.text(x - text_width(s, size), y, s, size=size, bold=bold)

    def rule(self, x1: float, y: float, x2: float, *, width: float = 0.5) -> None:
        self.ops.append(b"%.2f w %.2f %.2f m %.2f %.2f l S" % (width, x1, y, x2, y))


class Document:
    def __init__(self, title: str = "") -> None:
        self.title = title
        self.pages: list[Page] = []

    def new_page(self) -> Page:
        page = Page()
        self.pages.append(page)
        return page

    def render(self) -> bytes:
        objects: list[bytes] = []

        def add(body: bytes) -> int:
            objects.append(body)
            return len(objects)

        catalog = add(b"")  # filled in below
        pages_id = add(b"")
        f1 = add(
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
        )
        f2 = add(
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold "
            b"/Encoding /WinAnsiEncoding >>"
        )
        kids = []
        for page in self.pages or [Page()]:
            stream = zlib.compress(b"\n".join(page.ops))
            content = add(
                b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream"
                % (len(stream), stream)
            )
            kids.append(
                add(
                    b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] "
                    b"/Resources << /Font << /F1 %d 0 R /F2 %d 0 R >> >> /Contents %d 0 R >>"
                    % (pages_id, PAGE_W, PAGE_H, f1, f2, content)
                )
            )
        objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id
        objects[pages_id - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
            b" ".join(b"%d 0 R" % k for k in kids),
            len(kids),
        )
        info = add(b"<< /Title (%s) /Producer (token-billing console) >>" % _escape(self.title))
        out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        offsets = []
        for i, body in enumerate(objects, start=1):
            offsets.append(len(out))
            out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
        xref = len(out)
        out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
        for off in offsets:
            out += b"%010d 00000 n \n" % off
        out += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
            len(objects) + 1,
            catalog,
            info,
            xref,
        )
        return bytes(out)
