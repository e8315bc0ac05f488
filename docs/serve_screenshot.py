"""Take docs/serve.png: the nmt serve page in headless Chromium, one translation, a word hovered.

    python docs/serve_screenshot.py --checkpoint bench/.work/translate_speed/models/nmt-cli-transformer/run

Needs the serve and test extras and Debian's chromium and chromium-driver. The server runs
in this process on a free port; the PNG is reduced to a 256-colour palette to stay small.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from PIL import Image
from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from nmt_cli.decoding import Translator
from nmt_cli.serve.app import create_app
from nmt_cli.serve.model import load_served_model
from nmt_cli.serve.server import GracefulServer
from nmt_cli.serve.settings import ServeSettings

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1000,1060"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--text", default="Ein Mann mit einem roten Hut spielt Gitarre auf der Straße .")
    parser.add_argument("--hover", type=int, default=3, help="target word to hover (0-based)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "serve.png")
    args = parser.parse_args()

    app = create_app(lambda: load_served_model(args.checkpoint, Translator.from_checkpoint), ServeSettings())
    server = GracefulServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    for flag in FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
        driver = webdriver.Chrome(options=options, service=service)
        try:
            driver.get(url)
            wait = WebDriverWait(driver, 60)
            wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
            driver.find_element(By.ID, "source").send_keys(args.text)
            nbest = driver.find_element(By.ID, "nbest")
            nbest.clear()
            nbest.send_keys("3")
            driver.find_element(By.ID, "translate").click()
            word = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f".translation [data-j='{args.hover}']"))
            ActionChains(driver).move_to_element(word).perform()
            raw = Path(profile) / "page.png"
            driver.save_screenshot(str(raw))
        finally:
            driver.quit()
        Image.open(raw).convert("RGB").quantize(colors=256).save(args.out, optimize=True)
    server.should_exit = True
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
