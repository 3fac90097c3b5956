"""Which font files the PDFs embed.

Two Unicode fonts, both installed by pip with the project (``pyproject.toml``):

* the main font, Noto Sans (``fontpkg-noto-sans``): Latin with its
  extensions (Łódź), Cyrillic, Greek with its accents, the currency signs;
* the fallback for what the main font lacks, Noto Sans CJK
  (``noto-cjk-sans-otc``, the same file as Debian's ``fonts-noto-cjk``):
  Chinese, Japanese, Korean. Noto Sans CJK alone would not do: it lacks
  ``Ł``, ``ź`` and Greek with tonos.

``INVOICING_PDF_FONT`` / ``INVOICING_PDF_CJK_FONT`` name other files;
without them the packages' files are found through their distributions'
file lists (the packages' own code is never imported), then Debian's.
fpdf2 subsets each font to the glyphs a document uses; a document opens
the CJK font only when it has a character the main font lacks.

No main font at all is not an error: the PDF is still made, with the PDF
core font Helvetica (Latin only), and a warning is logged (never a 500).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from django.conf import settings
from fontTools.ttLib import TTCollection

logger = logging.getLogger(__name__)

# (distribution, file inside it) installed by pip; then files Debian's packages install.
MAIN_CANDIDATES: tuple[tuple[str, str] | str, ...] = (
    ("fontpkg-noto-sans", "fontpkg_noto_sans/files/NotoSans[wdth,wght].ttf"),
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",  # fonts-noto-core
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  # fonts-dejavu-core
)
CJK_CANDIDATES: tuple[tuple[str, str] | str, ...] = (
    ("noto-cjk-sans-otc", "noto_cjk_sans_otc/NotoSansCJK-Regular.ttc"),
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",  # fonts-noto-cjk
)
COLLECTIONS = (".ttc", ".otc")


@dataclass(frozen=True)
class FontFile:
    path: Path
    # The face inside a .ttc/.otc collection.
    index: int = 0


@dataclass(frozen=True)
class Fonts:
    main: FontFile | None
    cjk: FontFile | None


def _distribution_file(dist_name: str, relative: str) -> Path | None:
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(relative)))
    return path if path.is_file() else None


def _candidate(candidate: tuple[str, str] | str) -> Path | None:
    if isinstance(candidate, tuple):
        return _distribution_file(*candidate)
    path = Path(candidate)
    return path if path.is_file() else None


def _face_index(path: Path) -> int:
    """The Simplified Chinese face of a collection (the product's first
    market writes Chinese; every face has the kana and hangul too), else 0."""
    if path.suffix.lower() not in COLLECTIONS:
        return 0
    try:
        faces = TTCollection(str(path), lazy=True).fonts
        for i, face in enumerate(faces):
            name = face["name"].getDebugName(1) or ""
            if name.endswith(" SC"):
                return i
    except Exception:  # an unreadable collection: fpdf2 says why when it opens face 0
        logger.warning("could not read the faces of font collection %s", path, exc_info=True)
    return 0


def _find(configured: str, candidates, what: str) -> FontFile | None:
    if configured:
        path = Path(configured)
        if path.is_file():
            return FontFile(path, _face_index(path))
        logger.warning("%s %s does not exist; looking for the default fonts", what, configured)
    for candidate in candidates:
        found = _candidate(candidate)
        if found is not None:
            return FontFile(found, _face_index(found))
    return None


@lru_cache(maxsize=8)
def _resolve(main: str, cjk: str) -> Fonts:
    found = Fonts(
        main=_find(main, MAIN_CANDIDATES, "INVOICING_PDF_FONT"),
        cjk=_find(cjk, CJK_CANDIDATES, "INVOICING_PDF_CJK_FONT"),
    )
    if found.main is None:
        logger.warning(
            "No Unicode font for invoice PDFs (install the project with pip, or set "
            "INVOICING_PDF_FONT): they use Helvetica, and characters outside Latin-1 "
            "print as '?'."
        )
    elif found.cjk is None:
        logger.warning(
            "No CJK font for invoice PDFs (install noto-cjk-sans-otc or Debian's "
            "fonts-noto-cjk, or set INVOICING_PDF_CJK_FONT): Chinese, Japanese and "
            "Korean text will not print."
        )
    return found


def pdf_fonts() -> Fonts:
    """The fonts to embed, found once per process for each setting."""
    return _resolve(settings.INVOICING_PDF_FONT, settings.INVOICING_PDF_CJK_FONT)
