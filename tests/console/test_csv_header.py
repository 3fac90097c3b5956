# ruff: noqa: RUF001 - Chinese text keeps its full-width punctuation
"""``console.kernel.csv_header``: the one first line of every CSV (byte-order mark
and header row): the stable keys for scripts, English and ``?header=keys``,
the labels in the reader's language otherwise; keys with a placeholder
(``spend_{currency}``) get their label with the value filled in. And every
analytics chart's CSV, downloaded in Chinese, is labelled column by column
with the same rows as the keys' file."""

from __future__ import annotations

import csv
import io

import pytest
from django.conf import settings
from django.test import RequestFactory
from django.urls import reverse
from django.utils import translation
from django.utils.translation import pgettext_lazy

from console.features.analytics.csv_labels import CSV_LABELS
from console.features.analytics.views import CHARTS
from console.kernel.csv_header import BOM, header_line, header_row, label_for
from tests.console.test_analytics_data import RANGE
from tests.console.test_analytics_views import login

pytest_plugins = ["tests.console.test_analytics_data"]

LABELS = {
    "calls": pgettext_lazy("CSV header", "Calls"),
    "spend_{currency}": pgettext_lazy("CSV header", "Spend (%(currency)s)"),
}


def test_keys_for_scripts_labels_for_people():
    get = RequestFactory().get
    keys = ["calls", "spend_USD", "unlabelled"]
    with translation.override("zh-hans"):
        assert header_row(keys, LABELS) == keys  # the API passes no request
        assert header_row(keys, LABELS, request=get("/x", {"header": "keys"})) == keys
        assert header_row(keys, LABELS, request=get("/x")) == [
            "调用次数",
            "消费（USD）",
            "unlabelled",
        ]
        line = header_line(keys, LABELS, request=get("/x"))
        assert line == BOM + "调用次数,消费（USD）,unlabelled\r\n"
    with translation.override("en"):
        assert header_row(keys, LABELS, request=get("/x")) == keys
        assert header_line(keys, LABELS) == BOM + "calls,spend_USD,unlabelled\r\n"
        assert label_for("spend_EUR", LABELS) == "Spend (EUR)"


@pytest.mark.django_db
def test_every_analytics_csv_in_chinese(client, data):
    login(client, data)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    checked = 0
    for name in CHARTS:
        url = reverse(f"analytics:chart_{name}")
        response = client.get(url, {**RANGE, "format": "csv"})
        if response.status_code != 200 or not response["Content-Type"].startswith("text/csv"):
            continue
        chinese = list(csv.reader(io.StringIO(response.content.decode("utf-8"))))
        keys_response = client.get(url, {**RANGE, "format": "csv", "header": "keys"})
        keys = list(csv.reader(io.StringIO(keys_response.content.decode("utf-8"))))
        assert chinese[0][0].startswith(BOM) and keys[0][0].startswith(BOM)
        chinese[0][0], keys[0][0] = chinese[0][0][1:], keys[0][0][1:]
        for key, label in zip(keys[0], chinese[0], strict=True):
            assert label != key, (name, key)
            with translation.override("zh-hans"):
                assert label == label_for(key, CSV_LABELS)
        assert chinese[1:] == keys[1:], name
        checked += 1
    assert checked >= 10
