"""Debian's Chromium through Playwright's driver (no browser download), for the UI tests."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None
    expect = None


def doc_screenshot(page, tmp_path, name: str) -> None:
    """A full-page screenshot; also copied to ``NSQPY_SCREENSHOT_DIR`` when set (how the
    pictures in docs/nsqadmin.md are made: ``NSQPY_SCREENSHOT_DIR=docs pytest tests/admin``)."""
    import os
    import shutil

    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("NSQPY_SCREENSHOT_DIR"):
        shutil.copy(shot, os.environ["NSQPY_SCREENSHOT_DIR"])
