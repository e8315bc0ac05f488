"""The `nmt serve` web page in headless Chromium: translate, n-best, the heatmap, hovering a word.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them); skips, saying
so, where they cannot be found.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("uvicorn", reason="nmt serve needs the serve extra (pip install 'nmt-cli[serve]')")
pytest.importorskip("selenium", reason="the browser test needs selenium (pip install 'nmt-cli[test]')")

pytestmark = pytest.mark.slow  # a real server and a browser: make test runs them, make test-fast does not

from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from nmt_cli.serve.app import create_app  # noqa: E402
from nmt_cli.serve.model import load_served_model  # noqa: E402
from nmt_cli.serve.server import GracefulServer  # noqa: E402
from nmt_cli.serve.settings import ServeSettings  # noqa: E402

SENTENCE = "Eine traurige Tante besucht selten seine leeren Küchen ."
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1100,900"]


def find_browser() -> tuple[str, str]:
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("Chromium and chromedriver not found (apt-get install chromium chromium-driver; .ci/run does)")
    return browser, driver


@pytest.fixture(scope="module")
def server_url(tiny_trained_run: Path) -> Iterator[str]:
    """The app under uvicorn in a thread, on a free port."""
    import uvicorn

    app = create_app(lambda: load_served_model(tiny_trained_run, device="cpu"), ServeSettings())
    server = GracefulServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary, driver_path = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()


def api_translation(url: str, text: str, **options) -> dict:
    request = urllib.request.Request(f"{url}/v1/translate", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"text": text, "alignments": True, **options}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["translations"][0]


def test_page_translates_and_hovering_a_target_word_highlights_its_source_words(browser, server_url):
    browser.get(server_url)
    wait = WebDriverWait(browser, 30)
    wait.until(lambda driver: driver.find_element(By.ID, "translate").is_enabled())
    assert browser.find_element(By.ID, "pair").text == "German → English"
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    browser.find_element(By.ID, "translate").click()
    card = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, "#results .result"))
    expected = api_translation(server_url, SENTENCE, beam_size=2)
    alignment = expected["alignment"]
    assert card.find_element(By.CSS_SELECTOR, ".translation").text == " ".join(alignment["target_words"])
    assert [th.text for th in card.find_elements(By.CSS_SELECTOR, ".heatmap th.src")] == alignment["source_words"]
    assert [th.text for th in card.find_elements(By.CSS_SELECTOR, ".heatmap th.tgt")] == alignment["target_words"]
    cells = card.find_elements(By.CSS_SELECTOR, ".heatmap td")
    assert len(cells) == len(alignment["target_words"]) * len(alignment["source_words"])

    links = [tuple(map(int, link.split("-"))) for link in alignment["links"].split()]
    for j in range(len(alignment["target_words"])):
        word = card.find_element(By.CSS_SELECTOR, f".translation [data-j='{j}']")
        ActionChains(browser).move_to_element(word).perform()
        highlighted = {int(node.get_attribute("data-i"))
                       for node in card.find_elements(By.CSS_SELECTOR, ".source .word.highlight")}
        assert highlighted == {i for i, target in links if target == j}
        active_rows = card.find_elements(By.CSS_SELECTOR, ".heatmap th.tgt.active")
        assert [int(row.get_attribute("data-j")) for row in active_rows] == [j]
    assert browser.find_element(By.ID, "status").text.startswith("1 sentence in ")


def test_page_shows_the_nbest_list_and_errors(browser, server_url):
    browser.get(server_url)
    wait = WebDriverWait(browser, 30)
    wait.until(lambda driver: driver.find_element(By.ID, "translate").is_enabled())
    for field, value in (("beam", "3"), ("nbest", "3")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    browser.find_element(By.ID, "translate").click()
    items = wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, "#results .nbest li .alternative"))
    expected = api_translation(server_url, SENTENCE, beam_size=3, n_best=3)["nbest"]
    assert [item.text for item in items] == [entry["text"] for entry in expected]

    box = browser.find_element(By.ID, "nbest")  # more hypotheses than the beam has: the server says why
    box.clear()
    box.send_keys("5")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda driver: "n_best must be between 1 and beam_size (3)" in driver.find_element(By.ID, "status").text)


def test_page_sends_terms_and_marks_which_the_translation_met(browser, server_url):
    browser.get(server_url)
    wait = WebDriverWait(browser, 30)
    wait.until(lambda driver: driver.find_element(By.ID, "translate").is_enabled())
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    terms = browser.find_element(By.ID, "terms")
    terms.send_keys("Tante = aunt\n\nKüchen = kitchens\nTante = auntie")
    browser.find_element(By.ID, "translate").click()
    items = wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, "#results .terms li"))
    glossary = [["Tante", "aunt"], ["Küchen", "kitchens"], ["Tante", "auntie"]]
    expected = api_translation(server_url, SENTENCE, beam_size=2, glossary=glossary)["terms"]
    assert [term["source"] for term in expected] == ["Tante", "Küchen"]
    assert [(item.text, item.get_attribute("class")) for item in items] == [
        (f"{'✓' if term['met'] else '✗'} {term['source']} → {' / '.join(term['target'])}",
         "met" if term["met"] else "unmet") for term in expected]

    terms.clear()  # a line that is not "source = target": the page names it and sends nothing
    terms.send_keys("Tante aunt")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda driver: driver.find_element(By.ID, "status").text == 'terms line 1: expected "source = target"')
