"""Fixtures for the nsqadmin tests (processes and helpers live in ``admin_util``).

The browser is Debian's headless Chromium driven by Playwright's driver (never ``playwright
install``); tests that need it skip, with the reason, only when one of the two is missing."""

from __future__ import annotations

import os

import pytest

from admin.admin_util import ADMIN_USER, start_cluster
from admin.browser_util import CHROMIUM, CHROMIUM_ARGS, expect, sync_playwright


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """nsqlookupd + 2 nsqd + nsqadmin that only lets ``alice`` act, posting notifications."""
    cl, started = start_cluster(tmp_path_factory.mktemp("admin_cluster"),
                                f"--admin-user={ADMIN_USER}")
    yield cl
    for proc in reversed(started):
        proc.stop()
    assert cl.sink is not None
    cl.sink.close()


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        pytest.skip("the playwright Python package is not installed (pip install playwright)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    # waits for what must appear, far beyond the second or so it takes: Chromium, nsqadmin and
    # the daemons share the cores with the rest of the suite (a 5 s expect timed out on a busy
    # machine); a page that never shows it still fails, later
    pg.set_default_timeout(60_000)
    expect.set_options(timeout=30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda err: errors.append(str(err)))
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"
