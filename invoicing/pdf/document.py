"""An A4 business document on fpdf2: the fonts, bold, wrapped text blocks,
a table whose header row repeats on every page it runs onto, a diagonal
DRAFT mark, and "Page 1 of 3" footers once the page count is known.

Its own words (DRAFT, "(continued)", "Page 1 of 3") are translated into the
language active while it is built: ``invoicing.pdf.language.document_language``
makes that the document's language.

Every block is laid out from the height fpdf2 measures for its wrapped
text, so nothing is cut and nothing is printed over something else.

Bold: Noto Sans comes as a variable font whose bold instance takes fpdf2
seconds to cut, and the CJK fallback comes in one weight, so bold text is
drawn filled and outlined in its own colour (a thin stroke), which works
the same for every script and keeps the text extractable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

from django.utils.translation import pgettext
from fpdf import FPDF
from fpdf.drawing import DeviceGray, DeviceRGB
from fpdf.enums import Align, MethodReturnValue, TextMode, WrapMode, XPos, YPos
from fpdf.fonts import TTFFont

from invoicing.pdf.fonts import pdf_fonts

PAGE_W, PAGE_H = 210.0, 297.0  # A4, millimetres
MARGIN = 15.0
CONTENT_W = PAGE_W - 2 * MARGIN
BOTTOM = PAGE_H - 22.0  # content stops here; the footer sits below
PT = 0.3528  # millimetres per point

INK = (16, 24, 40)
MUTED = (102, 112, 133)
RULE = (208, 213, 221)
SHADE = (242, 244, 247)
ALERT = (180, 35, 24)


def line_height(size: float) -> float:
    return size * PT * 1.4


@dataclass(frozen=True)
class Column:
    title: str
    width: float
    align: str = "L"


class Document(FPDF):
    """``title`` and ``reference`` name the document in the continuation line
    and the footers of its pages; ``draft`` stamps every page."""

    def __init__(
        self, *, title: str, reference: str, owner: str, draft: bool = False, lang: str = "en"
    ):
        super().__init__(orientation="P", unit="mm", format="A4")
        self.doc_title, self.reference, self.owner, self.draft = title, reference, owner, draft
        self.set_margins(MARGIN, MARGIN, MARGIN)
        self.set_auto_page_break(False)  # pages break where the layout says, never mid-row
        self.set_title(f"{title} {reference}".strip())
        self.set_creator("Token Billing Console")
        self.set_lang(lang)  # BCP 47, for screen readers and text extraction
        fonts = pdf_fonts()
        main = fonts.main
        self.unicode = main is not None
        # The CJK font is opened only for a document with a character the main
        # font lacks: opening and subsetting it costs half a second.
        self._fallback = fonts.cjk
        if main is not None:
            self.add_font("body", "", str(main.path), collection_font_number=main.index)
            self._main_chars = cast(TTFFont, self.fonts["body"]).cmap  # added from a file
            self.family = "body"
        else:
            self.core_fonts_encoding = "windows-1252"
            self.family = "helvetica"
        self.style(9)

    def _open_fallback(self) -> None:
        font, self._fallback = self._fallback, None
        assert font is not None  # called only while the fallback is unopened
        self.add_font("cjk", "", str(font.path), collection_font_number=font.index)
        self.set_fallback_fonts(["cjk"], exact_match=False)

    # --- text ------------------------------------------------------------------------

    def normalize_text(self, text: str) -> str:
        """fpdf2 passes every text through here before laying it out."""
        if not self.unicode:
            text = text.replace("\u2212", "-").encode("cp1252", "replace").decode("cp1252")
        elif self._fallback is not None and any(
            ord(c) > 127 and ord(c) not in self._main_chars for c in text
        ):
            self._open_fallback()
        return super().normalize_text(text)

    def style(self, size: float, *, bold: bool = False, color=INK) -> None:
        if self.unicode:
            self.set_font(self.family, "", size)
            # Bold as fill + a hairline stroke in the same colour (see the module's note).
            self.text_mode = TextMode.FILL_STROKE if bold else TextMode.FILL
            self.line_width = size * 0.011 if bold else 0.2
        else:
            self.set_font(self.family, "B" if bold else "", size)
        self.set_text_color(*color)
        self.set_draw_color(*color)

    @contextmanager
    def styled(self, size: float, *, bold: bool = False, color=INK) -> Iterator[None]:
        keep = (self.font_size_pt, self.text_mode, self.line_width, self.text_color)
        self.style(size, bold=bold, color=color)
        try:
            yield
        finally:
            self.set_font(self.family, "", keep[0])
            self.text_mode, self.line_width = keep[1], keep[2]
            self.text_color = keep[3]

    def measure(self, width: float, text: str, size: float) -> float:
        """The height ``text`` takes wrapped into ``width`` at ``size`` points."""
        with self.styled(size):
            return self.multi_cell(  # type: ignore[return-value]  # HEIGHT: a float
                width,
                line_height(size),
                text,
                dry_run=True,
                output=MethodReturnValue.HEIGHT,
                wrapmode=WrapMode.WORD,
                padding=0,
            )

    def block(
        self,
        x: float,
        y: float,
        width: float,
        text: str,
        *,
        size: float = 9,
        bold: bool = False,
        color=INK,
        align: str = "L",
    ) -> float:
        """Wrapped text at (x, y); returns the y below it."""
        if not text:
            return y
        with self.styled(size, bold=bold, color=color):
            self.set_xy(x, y)
            self.multi_cell(
                width,
                line_height(size),
                text,
                align=Align.coerce(align),
                new_x=XPos.LEFT,
                new_y=YPos.NEXT,
                wrapmode=WrapMode.WORD,
                padding=0,
            )
        return self.get_y()

    def lines(self, x: float, y: float, width: float, rows: Sequence[tuple[str, bool]]) -> float:
        """Stacked wrapped lines (text, bold); returns the y below them."""
        for text, bold in rows:
            y = self.block(x, y, width, text, bold=bold)
        return y

    def pairs(
        self, x: float, y: float, width: float, label_w: float, rows: Sequence[tuple[str, str]]
    ) -> float:
        """A label / value list (the number-and-dates block); returns the y below."""
        for label, value in rows:
            bottom = self.block(x, y + 0.3, label_w - 2, label, size=8, color=MUTED)
            bottom = max(bottom, self.block(x + label_w, y, width - label_w, value, bold=True))
            y = bottom + 0.8
        return y

    def rule(self, x1: float, y: float, x2: float, *, width: float = 0.2, color=RULE) -> None:
        self.set_draw_color(*color)
        self.set_line_width(width)
        self.line(x1, y, x2, y)
        self.set_draw_color(*cast(DeviceGray | DeviceRGB, self.text_color).colors255)

    # --- pages -----------------------------------------------------------------------

    def header(self) -> None:
        """fpdf2 calls this on every new page: the DRAFT stamp, under the content.
        A cell (not ``text``), so a word in Chinese reaches the fallback font."""
        if not self.draft:
            return
        x, y = self.get_x(), self.get_y()
        with (
            self.styled(96, bold=False, color=(236, 238, 242)),
            self.rotation(35, PAGE_W / 2, PAGE_H / 2),
        ):
            height = line_height(96)
            self.set_xy(0, PAGE_H / 2 - height / 2)
            self.cell(PAGE_W, height, pgettext("invoice PDF", "DRAFT"), align=Align.C)
        self.set_xy(x, y)

    def fits(self, height: float) -> bool:
        return self.get_y() + height <= BOTTOM

    def continuation(self) -> float:
        """A new page that carries on the document; returns where content starts."""
        self.add_page()
        text = pgettext("invoice PDF", "%(document)s · %(owner)s (continued)") % {
            "document": f"{self.doc_title} {self.reference}".strip(),
            "owner": self.owner,
        }
        y = self.block(MARGIN, MARGIN - 3, CONTENT_W, text, size=8, color=MUTED)
        self.rule(MARGIN, y + 1, PAGE_W - MARGIN)
        self.set_y(y + 4)
        return y + 4

    def ensure(self, height: float) -> bool:
        """Room for ``height`` more, else a continuation page; True when it broke."""
        if self.fits(height):
            return False
        self.continuation()
        return True

    def finish(self) -> bytes:
        """Footers on every page (page numbers once there is more than one), then the bytes."""
        total = self.pages_count
        for number in range(1, total + 1):
            self.page = number
            y = PAGE_H - 14
            self.rule(MARGIN, y - 1.5, PAGE_W - MARGIN)
            left = f"{self.owner} · {self.doc_title} {self.reference}".strip()
            self.block(MARGIN, y, CONTENT_W * 0.7, left, size=7.5, color=MUTED)
            if total > 1:
                self.block(
                    MARGIN + CONTENT_W * 0.7,
                    y,
                    CONTENT_W * 0.3,
                    pgettext("invoice PDF", "Page %(number)s of %(total)s")
                    % {"number": number, "total": total},
                    size=7.5,
                    color=MUTED,
                    align="R",
                )
        self.page = total
        return bytes(self.output())


class Table:
    """Rows of wrapped cells under a header row that is drawn again at the
    top of every page the table runs onto."""

    def __init__(self, doc: Document, columns: Sequence[Column], *, size: float = 8.5):
        self.doc, self.columns, self.size = doc, list(columns), size
        self.pad = 1.2

    def _height(self, cells: Sequence[str], size: float, widths: Sequence[float]) -> float:
        return (
            max(
                self.doc.measure(w - 2 * self.pad, text, size) if text else line_height(size)
                for text, w in zip(cells, widths, strict=True)
            )
            + 2 * self.pad
        )

    def _draw(
        self,
        cells: Sequence[str],
        widths: Sequence[float],
        aligns: Sequence[str],
        *,
        size: float,
        bold: bool,
        fill=None,
        color=INK,
        rule: bool = True,
    ) -> None:
        doc = self.doc
        height = self._height(cells, size, widths)
        y = doc.get_y()
        if fill is not None:
            doc.set_fill_color(*fill)
            doc.rect(MARGIN, y, sum(widths), height, style="F")
        x = MARGIN
        for text, w, align in zip(cells, widths, aligns, strict=True):
            doc.block(
                x + self.pad,
                y + self.pad,
                w - 2 * self.pad,
                text,
                size=size,
                bold=bold,
                color=color,
                align=align,
            )
            x += w
        if rule:
            doc.rule(MARGIN, y + height, MARGIN + sum(widths))
        doc.set_y(y + height)

    def header(self) -> None:
        self._draw(
            [c.title for c in self.columns],
            [c.width for c in self.columns],
            [c.align for c in self.columns],
            size=7.5,
            bold=True,
            fill=SHADE,
            color=MUTED,
        )

    def start(self) -> None:
        header = self._height([c.title for c in self.columns], 7.5, [c.width for c in self.columns])
        self.doc.ensure(header + 2 * line_height(self.size) + 4)
        self.header()

    def row(
        self,
        cells: Sequence[str],
        *,
        bold: bool = False,
        span: bool = False,
        fill=None,
        keep_with_next: float = 0.0,
        rule: bool = True,
    ) -> None:
        """One row; ``span`` lays the first cell across every column but the
        last (a group heading or a subtotal)."""
        if span:
            widths = [sum(c.width for c in self.columns[:-1]), self.columns[-1].width]
            aligns = ["L", self.columns[-1].align]
        else:
            widths = [c.width for c in self.columns]
            aligns = [c.align for c in self.columns]
        height = self._height(cells, self.size, widths)
        if self.doc.ensure(height + keep_with_next):
            self.header()
        self._draw(cells, widths, aligns, size=self.size, bold=bold, fill=fill, rule=rule)
