"""Analytics pages of the console: latency, cache, spend, errors, nodes and
billing charts, and the usage tiles of the overview.

- ``forms.py`` parses every page's and partial's query string (presets and
  custom ranges in the organization's time zone, dimensions, how to split);
  ``query.py`` turns a valid form into a ``Query``: the range and bucket
  (hours up to 72 hours, local days beyond), the filters narrowed to a
  developer's own keys, display names and one colour per model.
- ``chart.py`` holds what every chart shares: the ``Chart`` (a Plotly
  figure plus the rows of its CSV), the figure, line and bar builders, and
  ``series_of``, which reads ``usage.charts.series`` (the hourly rollups,
  never call records). One module per page builds that page's charts:
  ``latency.py``, ``cache.py``, ``spend.py``, ``errors.py``, ``nodes.py``,
  ``billing.py`` (invoiced, paid and refunded, read through
  ``invoicing.facade``) and ``overview.py`` (the overview's tiles);
  ``breakdowns.py`` the charts that split a total by cause (where time goes,
  refusals by cause) the same way.
- ``views.py`` renders a page with one htmx placeholder per chart; each chart
  is its own partial (``analytics/charts/<name>/``, ``?format=csv`` for its
  numbers), so pages answer at once and charts load side by side.

What the rollups cannot answer is said on the pages rather than guessed: they
have no stream dimension, so there is no stream filter."""
