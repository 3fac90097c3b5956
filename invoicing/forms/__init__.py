"""Forms of the finance console. They parse what a person typed (amounts in
currency units, times in the organization's time zone) into what the
services take (integer micro- or minor units, aware datetimes); the
services decide everything else, and their errors come back onto the form.

By page: ``fields`` (what they all share), ``lists`` (the invoice list and
the exports), ``invoices`` (an invoice's actions), ``credit_notes``, and
``balance`` (the prepaid balance, the billing profile, top-ups)."""
