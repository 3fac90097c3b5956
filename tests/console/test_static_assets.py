"""Static files as production serves them: hashed names, gzip and brotli
copies, a year's cache, collected only when a source changed; plotly.js in
its smallest build, and only on pages with charts."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from django.contrib.staticfiles.storage import staticfiles_storage

from accounts.models import Role
from console.staticassets import collect_static

ROOT = Path(__file__).resolve().parents[2]
HASHED = re.compile(r"/static/.+\.[0-9a-f]{12}\.[a-z0-9]+$")
YEAR = 365 * 24 * 3600
# What plotly.js's basic bundle draws (static/vendor/UPDATING.md).
BASIC_TRACES = {"Scatter", "Bar", "Pie"}


def max_age(cache_control: str) -> int:
    match = re.search(r"max-age=(\d+)", cache_control or "")
    return int(match.group(1)) if match else 0


# --- the first page of a fresh session, in Chromium ---------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_first_page_loads_compressed_hashed_year_cached_assets(live_server, browser_page, owner):
    """The live server serves static files through WhiteNoise from the
    collected folder (tests/conftest.py), as ``up`` does."""
    from tests.services import sign_in

    page, errors = browser_page
    base = live_server.url
    static: dict[str, object] = {}
    page.on(
        "response", lambda r: r.url.startswith(base + "/static/") and static.setdefault(r.url, r)
    )

    # Given a browser with an empty cache that signs in and lands on the overview
    # (each file's first response is kept: later ones may come from its cache),
    sign_in(page, base, owner.user)
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => window.Plotly !== undefined", timeout=15000)

    # every static file it names is hashed,
    named = page.eval_on_selector_all(
        "script[src], link[href]",
        "els => els.map(e => e.getAttribute('src') || e.getAttribute('href'))"
        ".filter(u => u.startsWith('/static/'))",
    )
    assert named and all(HASHED.search(u) for u in named), named
    assert set(static) >= {base + u for u in named}
    # and comes with a year's cache (immutable: not even revalidated);
    for url, response in static.items():
        assert response.status == 200, url
        assert max_age(response.headers.get("cache-control")) >= YEAR, url
        assert "immutable" in response.headers["cache-control"], url
    # plotly.js, the basic build, transferred compressed.
    plotly = [r for u, r in static.items() if "/static/vendor/plotly-basic.min." in u]
    assert len(plotly) == 1, list(static)
    response = plotly[0]
    assert response.headers.get("content-encoding") in ("br", "gzip")
    transferred = response.request.sizes()["responseBodySize"]
    assert len(response.body()) > 1_000_000 and transferred < 450_000, transferred
    assert errors == []


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_pages_without_charts_do_not_load_plotly(live_server, browser_page, members):
    from tests.services import sign_in

    page, errors = browser_page
    base = live_server.url
    scripts: list[str] = []
    page.on("request", lambda r: r.resource_type == "script" and scripts.append(r.url))
    sign_in(page, base, members[Role.OWNER].user)
    for path in ("/keys/", "/sub-accounts/", "/members/", "/nodes/", "/usage/calls/",
                 "/usage/models/", "/billing/invoices/", "/audit/", "/org/settings/"):  # fmt: skip
        scripts.clear()
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        assert scripts, path  # htmx and console.js at least
        assert not [s for s in scripts if "plotly" in s], path
    assert errors == []


def test_brotli_and_gzip_copies_are_served_to_who_accepts_them(live_server):
    url = live_server.url + staticfiles_storage.url("vendor/plotly-basic.min.js")
    assert HASHED.search(url)
    sizes = {}
    for encoding in ("br", "gzip", "identity"):
        request = urllib.request.Request(url, headers={"Accept-Encoding": encoding})  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            assert response.headers.get("Content-Encoding", "identity") == encoding
            assert "immutable" in response.headers["Cache-Control"]
            sizes[encoding] = len(response.read())
    assert sizes["br"] < sizes["gzip"] < sizes["identity"] / 2


# --- collecting only when something changed ----------------------------------


def test_collect_static_runs_again_only_when_a_source_changes(settings, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    script = source / "app.js"
    script.write_text("// the console's script\n" + "console.log('hello, compressible');\n" * 200)
    settings.STATICFILES_DIRS = [source]
    settings.STATICFILES_FINDERS = ["django.contrib.staticfiles.finders.FileSystemFinder"]
    settings.STATIC_ROOT = tmp_path / "collected"

    # Given a source folder never collected, collect_static collects it:
    assert collect_static() is True
    hashed = staticfiles_storage.url("app.js")
    name = Path(hashed).name
    assert re.fullmatch(r"app\.[0-9a-f]{12}\.js", name)
    out = settings.STATIC_ROOT
    assert {p.name for p in out.iterdir() if p.is_file()} >= {name, name + ".gz", name + ".br"}
    assert not (out / "app.js").exists()  # only the hashed names are kept
    # nothing changed: nothing to do;
    assert collect_static() is False
    # a source changed: collected again, under a new name.
    script.write_text(script.read_text() + "console.log('changed');\n")
    assert collect_static() is True
    assert staticfiles_storage.url("app.js") != hashed
    assert not (out / name).exists()


# --- plotly.js: the smallest build that draws our charts ----------------------


def test_charts_use_only_trace_types_of_the_vendored_plotly_build():
    used = set()
    for path in ROOT.glob("*/**/*.py"):
        if path.parts[len(ROOT.parts)] in {"tests", ".venv", ".venv-ci"}:
            continue
        used |= set(re.findall(r"\bgo\.([A-Z]\w*)\(", path.read_text()))
    traces = used - {"Figure", "Layout"}
    assert traces, "no chart found: has the analytics code moved?"
    assert traces <= BASIC_TRACES, (
        f"{sorted(traces - BASIC_TRACES)} are not in plotly.js's basic bundle: "
        "see static/vendor/UPDATING.md"
    )


def test_vendored_plotly_matches_the_python_plotly_minor_version():
    """The vendored basic bundle is the plotly.js release the Python package
    bundles, to the minor version: figures built by plotly.py are drawn by the
    library they were built for (a patch release may differ: fixes only).
    Read from each file's banner; static/vendor/UPDATING.md moves both."""
    import plotly

    bundled = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()[:300]
    vendored = (ROOT / "static" / "vendor" / "plotly-basic.min.js").read_text()[:300]
    python_js = re.search(r"plotly\.js v(\d+)\.(\d+)\.(\d+)", bundled)
    ours = re.search(r"plotly\.js \(basic - minified\) v(\d+)\.(\d+)\.(\d+)", vendored)
    assert python_js and ours, "a banner moved: read the first lines of both files"
    assert ours.group(1, 2) == python_js.group(1, 2), (
        f"static/vendor/plotly-basic.min.js is plotly.js {'.'.join(ours.groups())}, "
        f"plotly {plotly.__version__} bundles {'.'.join(python_js.groups())}: "
        "see static/vendor/UPDATING.md"
    )
    assert (ROOT / "static" / "vendor" / "plotly-basic.LICENSE").read_text().startswith("MIT")
