"""The invoice and credit-note PDFs (fpdf2, with embedded subset Unicode fonts).

``invoice_pdf(invoice) -> bytes`` and ``credit_note_pdf(note) -> bytes`` are
the entry points; ``fonts`` says which fonts, ``document`` how a page is laid out."""

from invoicing.pdf.credit_note import credit_note_pdf
from invoicing.pdf.invoice import invoice_pdf

__all__ = ["credit_note_pdf", "invoice_pdf"]
