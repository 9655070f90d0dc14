"""A screenshot of the attention explorer translating one sentence (the README's picture).

    python scripts/explorer_screenshot.py \
        "ckpt=[attention:runs/best_de_en/checkpoints/trained.pt,none:runs/best_de_en_none/checkpoints/best.pt]" \
        --text "Ein Mann mit einem roten Hut fährt mit dem Fahrrad über eine Brücke." --output docs/figures/explorer.png

Starts ``nmt.demo``'s server on a free loopback port, opens the page in headless chromium (Debian's
``chromium`` and ``chromium-driver``, driven by selenium), types the text, submits, waits for every
column's answer, and saves the page as a PNG.
"""

from __future__ import annotations

import argparse
import shutil
import threading
from pathlib import Path

from omegaconf import OmegaConf

from nmt.demo import load_explorer, make_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ckpt", help='as for nmt.demo: "ckpt=[name:PATH,...]"')
    parser.add_argument("--text", required=True, help="the source sentence to type")
    parser.add_argument("--output", default="explorer.png", help="where the PNG goes")
    parser.add_argument("--size", default="1500,1100", help="window width,height in pixels")
    args = parser.parse_args(argv)

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    defaults = OmegaConf.load(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml")
    defaults.pop("defaults")
    defaults.pop("hydra")
    cfg = OmegaConf.merge(defaults, OmegaConf.from_dotlist([args.ckpt]))
    explorer = load_explorer(cfg)
    server = make_server(explorer, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={args.size}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait = WebDriverWait(driver, 300)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.model")) == len(explorer.translators))
        driver.find_element(By.ID, "text").send_keys(args.text)
        driver.find_element(By.ID, "submit").click()
        wait.until(lambda d: all(e.text.strip() for e in d.find_elements(By.CSS_SELECTOR, ".translation")))
        driver.save_screenshot(args.output)
        for column in driver.find_elements(By.CSS_SELECTOR, "section.model"):
            print(column.get_attribute("data-model"), ":", column.find_element(By.CSS_SELECTOR, ".translation").text)
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    main()
