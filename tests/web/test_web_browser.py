"""The web view in a real browser: headless Chromium from Debian's packages, driven by Selenium
through the system chromedriver (nothing is downloaded). It opens the view with the token once,
reads the agents, pages through alice's memories, searches in Japanese through the form, and
checks the rendered text; a screenshot of the search is kept (docs/web-view.png is one)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from web_support import WebServer, fill

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
TOKEN = "browser-token-51c"

if not (CHROMIUM and DRIVER):
    # .ci/run installs both; a developer machine without them skips, CI never does.
    if os.environ.get("CI"):
        raise RuntimeError("chromium and chromedriver must be installed in CI (see .ci/run)")
    pytest.skip("chromium / chromedriver are not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def wait_for_text(browser: webdriver.Chrome, css: str, text: str) -> None:
    """Until the page that a click loads shows `text` in `css` (never read the old page)."""
    WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: text in d.find_element(By.CSS_SELECTOR, css).text
    )


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("browser") / "mem.db"
    fill(db)
    server = WebServer(db, {"CPERSONA_AUTH_TOKEN": TOKEN})
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1200,900")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_a_person_browses_pages_and_searches(view: str, browser: webdriver.Chrome, tmp_path):
    browser.get(view)
    assert "Token required" in browser.find_element(By.TAG_NAME, "h1").text

    browser.get(f"{view}?token={TOKEN}")
    assert browser.current_url == view  # the token left the address bar
    rows = browser.find_elements(By.CSS_SELECTOR, "table.agents tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["alice", "bob"]

    browser.find_element(By.LINK_TEXT, "alice").click()
    wait_for_text(browser, ".pager", "page 1 of 3")
    first = browser.find_elements(By.CSS_SELECTOR, "ol.rows p.content")
    assert first[0].text == "会議は火曜日の午後三時に変更されました"
    assert first[1].text == "<b>bold</b> & <script>alert(1)</script>"  # shown, not run
    browser.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    wait_for_text(browser, ".pager", "page 2 of 3")

    browser.get(view)
    box = browser.find_element(By.NAME, "q")
    box.send_keys("火曜日の会議")
    browser.find_element(By.CSS_SELECTOR, "form.search button").click()
    # The answer is a new page: wait for it rather than read the old one.
    WebDriverWait(browser, 30).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "ol.results"))
    )
    results = browser.find_elements(By.CSS_SELECTOR, "ol.results li")
    assert results[0].find_element(By.CSS_SELECTOR, "p.content").text == (
        "会議は火曜日の午後三時に変更されました"
    )
    reason = results[0].find_element(By.CSS_SELECTOR, "dl.reason").text
    assert "signal" in reason and "score" in reason
    assert browser.find_element(By.NAME, "q").get_attribute("value") == "火曜日の会議"

    shot = tmp_path / "web-view.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
    keep = os.environ.get("CPERSONA_WEB_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(shot.read_bytes())
