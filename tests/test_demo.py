"""The attention explorer (``nmt.demo``): its answers (translation, n-best, heatmap; a message for a
model without attention), refused requests, 50 requests at once over loopback, and the page driven
in a real browser (Debian's headless chromium through selenium), with a screenshot."""

from __future__ import annotations

import json
import re
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CONFIG_DIR, SmokeRun
from hydra import compose, initialize_config_dir

from nmt.checkpoint import save_checkpoint
from nmt.data.corpora import load_corpus
from nmt.data.subwords import VocabSettings, build_vocabs
from nmt.demo import NO_ALIGNMENT, Explorer, Limits, RequestError, choose_layers, load_explorer, make_server
from nmt.errors import ConfigError
from nmt.evaluation.word_alignment import drop_eos, hard_links
from nmt.model import build_model
from nmt.translator import Translator


@pytest.fixture(scope="module")
def explorer(smoke_run: SmokeRun, tmp_path_factory: pytest.TempPathFactory) -> Explorer:
    """The trained smoke model (additive attention) beside an untrained model without attention."""
    folder = tmp_path_factory.mktemp("demo")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=smoke", "model/attention=none", f"data.cache_dir={folder}"])
    vocabs = build_vocabs(load_corpus(cfg.data)["train"].pairs, VocabSettings(**cfg.data.vocab), folder / "spm")
    torch.manual_seed(0)
    save_checkpoint(folder / "none.pt", build_model(cfg.model, len(vocabs[0]), len(vocabs[1])), cfg, *vocabs)
    translators = {"attention": Translator.from_checkpoint(smoke_run.checkpoint, device="cpu"),
                   "none": Translator.from_checkpoint(folder / "none.pt", device="cpu")}  # fmt: skip
    return Explorer(translators, Limits(max_chars=300, max_beam=8), paths={"attention": str(smoke_run.checkpoint)})


@pytest.fixture(scope="module")
def server(explorer: Explorer) -> Iterator[str]:
    """The explorer served on a free loopback port; yields its base URL."""
    httpd = make_server(explorer, "127.0.0.1", 0, max_connections=64)  # room for the 50 requests at once below
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _post(url: str, body: bytes, timeout: float = 120) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/api/translate", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _translate(url: str, **fields) -> tuple[int, dict]:
    return _post(url, json.dumps(fields).encode())


@pytest.fixture(autouse=True)
def _loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest makes every urlopen fail (no network); these tests talk to their own loopback server."""
    monkeypatch.undo()


# --------------------------------------------------------------------------- the answers


def test_every_model_answers_with_translation_nbest_and_attention(explorer: Explorer, smoke_run: SmokeRun) -> None:
    source = smoke_run.test_src[0]
    answer = explorer.translate({"text": source, "beam_size": 4, "n_best": 3})
    attention, none = answer["results"]
    assert [attention["name"], none["name"]] == ["attention", "none"]
    expected = explorer.translators["attention"].translate(source, beam_size=4, n_best=3)
    assert attention["text"] == expected.text and [t for t, _ in attention["nbest"]] == [t for t, _ in expected.nbest]
    assert len(attention["nbest"]) == 3 and attention["nbest"][0][0] == attention["text"]
    scores = [s for _, s in attention["nbest"]]
    assert scores == sorted(scores, reverse=True)
    weights = torch.tensor(attention["attention"])
    assert weights.shape == (len(attention["tgt_tokens"]), len(attention["src_tokens"]))
    assert torch.allclose(weights.sum(1), torch.ones(len(weights)), atol=1e-3), "each row is a distribution"
    assert attention["note"] == ""
    assert none["attention"] is None and none["note"] == NO_ALIGNMENT, "no zeros drawn for a model without attention"


def test_defaults_come_from_each_checkpoint(explorer: Explorer, smoke_run: SmokeRun) -> None:
    answer = explorer.translate({"text": smoke_run.test_src[1]})
    default = explorer.translators["attention"].translate(smoke_run.test_src[1])
    assert answer["results"][0]["text"] == default.text
    models = explorer.models()
    assert models[0]["attention"] is True and models[1]["attention"] is False
    assert models[0]["checkpoint"] == str(smoke_run.checkpoint)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"text": ""}, "Type a sentence to translate."),
        ({"text": "  \n\t "}, "Type a sentence to translate."),
        ({"text": "x" * 5000}, "The text has 5,000 characters; the explorer translates up to 300 at a time"),
        ({"text": "ab", "beam_size": 0}, "beam_size=0: must be a whole number from 1 to 8"),
        ({"text": "ab", "beam_size": 9}, "beam_size=9: must be a whole number from 1 to 8"),
        ({"text": "ab", "beam_size": "5"}, "beam_size='5': must be a whole number"),
        ({"text": "ab", "beam_size": 2, "n_best": 3}, "n_best=3: must be a whole number from 1 to 2"),
        ({"text": "ab", "n_best": 8}, "n_best=8 must be <= beam_size, which is 5 for attention"),
        ({"text": "a\ud800b"}, "the text is not valid Unicode: character 2 is a lone surrogate (U+D800)"),
        ({"text": "ab", "beam_size": 10**5000}, "beam_size=<int too long to show>: must be a whole number"),
        ({"text": 42}, "text must be a string"),
        ({"txt": "ab"}, "unknown field(s) txt"),
        (["ab"], "send a JSON object"),
    ],
)
def test_bad_requests_get_a_message(explorer: Explorer, request_, message: str) -> None:
    with pytest.raises(RequestError) as error:
        explorer.translate(request_)
    assert message in str(error.value)


def test_a_transformer_column_says_which_layer_and_heads_it_shows(explorer: Explorer, tmp_path: Path) -> None:
    """``align.layer``/``align.heads`` choose the cross-attention of every Transformer checkpoint;
    ``/api/models`` says which (an RNN decoder has one attention: nothing to say)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=smoke_transformer", f"data.cache_dir={tmp_path}"])
    vocabs = build_vocabs(load_corpus(cfg.data)["train"].pairs, VocabSettings(**cfg.data.vocab), tmp_path / "spm")
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "tf.pt", build_model(cfg.model, len(vocabs[0]), len(vocabs[1])), cfg, *vocabs)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        demo = compose("demo", overrides=[f"ckpt=[tf:{tmp_path / 'tf.pt'}]", "device=cpu", "align.layer=-1",
                                          "align.heads=[1,3]"])  # fmt: skip
    transformer = load_explorer(demo)
    (info,) = transformer.models()
    assert info["cross_attention"] == [{"layer": 1, "num_layers": 2, "heads": [1, 3], "num_heads": 4}]
    assert info["shown"] == "cross-attention layer 1 of 0-1, mean of heads 1, 3 of 4"
    rnn = explorer.models()[0]
    assert (rnn["cross_attention"], rnn["shown"]) == ([], "")
    translators = {"rnn": explorer.translators["attention"], **transformer.translators}
    choose_layers(translators, 0, None)  # the RNN checkpoint beside it keeps its one attention
    assert transformer.models()[0]["shown"] == "cross-attention layer 0 of 0-1, mean of all 4 heads"
    with pytest.raises(ConfigError, match="align.heads"):
        choose_layers(translators, None, [4])
    with pytest.raises(ConfigError, match="no checkpoint given has one"):
        choose_layers({"rnn": explorer.translators["attention"]}, 0, None)


# --------------------------------------------------------------------------- over HTTP


def test_page_and_models_are_served(server: str) -> None:
    with urllib.request.urlopen(f"{server}/", timeout=30) as response:
        html = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
    assert 'id="text"' in html and "/api/translate" in html
    with urllib.request.urlopen(f"{server}/api/models", timeout=30) as response:
        info = json.loads(response.read())
    assert [m["name"] for m in info["models"]] == ["attention", "none"] and info["max_chars"] == 300


def test_the_page_has_a_colour_scale_for_its_heatmaps(server: str) -> None:
    """Before, nothing said what a cell's shade meant: each heatmap now gets this scale, 0 to 1."""
    with urllib.request.urlopen(f"{server}/", timeout=30) as response:
        html = response.read().decode()
    template = re.search(r'<template id="scale">(.*?)</template>', html, re.S)
    assert template, "no colour scale in the page"
    labels = re.findall(r"<span[^>]*>([^<]*)</span>", template[1])
    assert labels == ["0", "", "1", "attention weight"] and 'class="bar"' in template[1]
    assert 'getElementById("scale").content.cloneNode' in html  # every heatmap gets one


def test_http_errors_are_messages_and_the_server_keeps_serving(server: str, smoke_run: SmokeRun) -> None:
    status, answer = _post(server, b"{not json")
    assert status == 400 and "not valid JSON" in answer["error"]
    status, answer = _post(server, json.dumps({"text": "a" * 70_000}).encode())
    assert status == 413 and "at most 65,536" in answer["error"]
    status, answer = _translate(server, text="")
    assert (status, answer["error"]) == (400, "Type a sentence to translate.")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{server}/nothing", timeout=30)
    assert missing.value.code == 404
    status, answer = _translate(server, text=smoke_run.test_src[2], beam_size=2)
    assert status == 200 and answer["results"][0]["text"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"text": "x", "n_best": 8}', "n_best=8 must be <= beam_size"),
        (b'{"text": "\\ud800"}', "the text is not valid Unicode"),
        (b"[" * 30_000 + b"]" * 30_000, "the JSON is nested too deeply"),
        (b'{"text": "x", "beam_size": ' + b"9" * 5000 + b"}", "the JSON has a number too long to read"),
    ],
    ids=["n_best-over-default-beam", "lone-surrogate", "nested-30000-deep", "5000-digit-number"],
)
def test_requests_that_broke_the_server_get_a_400(server: str, body: bytes, message: str) -> None:
    status, answer = _post(server, body)
    assert (status, answer["error"][: len(message)]) == (400, message)
    assert "\n" not in answer["error"]
    status, answer = _translate(server, text="ab")
    assert status == 200, "the server keeps serving"


def test_fifty_concurrent_requests_all_answered_correctly(server: str, explorer: Explorer, smoke_run: SmokeRun) -> None:
    sources = [smoke_run.test_src[i % 10] for i in range(50)]
    expected = {s: explorer.translators["attention"].translate(s, beam_size=3, n_best=2).nbest for s in set(sources)}
    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(lambda s: _translate(server, text=s, beam_size=3, n_best=2), sources))
    for source, (status, answer) in zip(sources, answers):
        assert status == 200, answer
        assert answer["source"] == source
        got = answer["results"][0]["nbest"]
        assert [t for t, _ in got] == [t for t, _ in expected[source]]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected[source]], abs=1e-3)
    status, answer = _translate(server, text=sources[0], beam_size=3, n_best=2)
    assert status == 200 and [t for t, _ in answer["results"][0]["nbest"]] == [t for t, _ in expected[sources[0]]]


def test_only_loopback(explorer: Explorer) -> None:
    with pytest.raises(ConfigError, match="loopback interface only"):
        make_server(explorer, "0.0.0.0", 0)


# --------------------------------------------------------------------------- in a real browser


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        pytest.fail("this test drives a real browser: install Debian's chromium and its driver "
                    "(apt-get install chromium chromium-driver), as .ci/run does")  # fmt: skip
    return browser, driver


# every row of a column's heatmap: its label, decoder step, link (data-link; null without one) and weights
HEATMAP_ROWS = """
return [...document.querySelectorAll(arguments[0] + " table.heatmap tbody tr")].map((row) => ({
  token: row.querySelector("th").textContent, step: Number(row.dataset.step),
  link: row.dataset.link === undefined ? null : Number(row.dataset.link),
  marked: [...row.querySelectorAll("td")].findIndex((cell) => cell.classList.contains("link")),
  weights: [...row.querySelectorAll("td")].map((cell) => Number(cell.dataset.weight)),
}));"""


def _check_readings(driver, column: str, tgt_tokens: list[str]) -> None:
    """Shift-Att moves every row up one step under the same labels, the final </s> losing its row;
    the links are the Python extraction's (argmax, </s> unaligned on request) on the rows drawn."""
    from selenium.webdriver.common.by import By

    plain = driver.execute_script(HEATMAP_ROWS, column)
    assert [r["token"] for r in plain] == tgt_tokens and [r["step"] for r in plain] == list(range(len(tgt_tokens)))
    assert all(r["link"] is None and r["marked"] == -1 for r in plain), "no links until asked for"
    driver.find_element(By.ID, "shift").click()
    moved = driver.execute_script(HEATMAP_ROWS, column)
    assert [r["token"] for r in moved] == tgt_tokens[:-1]
    assert [r["step"] for r in moved] == list(range(1, len(tgt_tokens)))
    assert [r["weights"] for r in moved] == [r["weights"] for r in plain[1:]]
    assert "Shift-Att" in driver.find_element(By.CSS_SELECTOR, f"{column} .reading-note").text
    assert not driver.find_element(By.ID, "eos").is_enabled(), "</s> as unaligned is an option of the links"
    driver.find_element(By.ID, "links").click()
    for eos_unaligned in (False, True):
        if eos_unaligned:
            driver.find_element(By.ID, "eos").click()
        rows = driver.execute_script(HEATMAP_ROWS, column)
        expected = hard_links(drop_eos(np.array([r["weights"] for r in rows]), eos_unaligned))
        assert {(r["link"], t) for t, r in enumerate(rows) if r["link"] >= 0} == expected
        assert all(r["marked"] == r["link"] for r in rows)
    driver.find_element(By.ID, "shift").click()  # back to plain: the final </s> row is no word, and gets no link
    rows = driver.execute_script(HEATMAP_ROWS, column)
    assert len(rows) == len(tgt_tokens) and rows[-1]["link"] is None and rows[0]["link"] is not None
    label = driver.execute_script(
        'return column(arguments[0]).querySelector(".shown").textContent',
        {"name": "t", "shown": "cross-attention layer 4 of 0-5, mean of all 8 heads"},
    )
    assert label == "Heatmap: cross-attention layer 4 of 0-5, mean of all 8 heads"
    assert not driver.find_elements(By.CSS_SELECTOR, f"{column} .shown"), "an RNN has one attention: no label"


def test_the_page_in_headless_chromium(server: str, explorer: Explorer, smoke_run: SmokeRun, tmp_path: Path) -> None:
    """Type a sentence, submit, and see both columns: a translation and a heatmap for the model with
    attention, the no-alignment message for the model without; then read the heatmap shifted, with links."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(server)
        wait = WebDriverWait(driver, 120)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.model")) == 2)
        source = smoke_run.test_src[3]
        driver.find_element(By.ID, "text").send_keys(source)
        driver.find_element(By.ID, "submit").click()
        column = 'section[data-model="attention"]'
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"{column} .translation").text.strip())
        expected = explorer.translators["attention"].translate(source, beam_size=explorer.models()[0]["beam_size"])
        assert driver.find_element(By.CSS_SELECTOR, f"{column} .translation").text == expected.text
        cells = driver.find_elements(By.CSS_SELECTOR, f"{column} table.heatmap td")
        assert len(cells) == len(expected.src_tokens) * len(expected.tgt_tokens)
        assert all(0.0 <= float(c.get_attribute("data-weight")) <= 1.0 for c in cells)
        assert "←" in cells[0].get_attribute("title")
        scale = driver.find_element(By.CSS_SELECTOR, f"{column} .scale")  # what a shade means, 0 to 1
        assert scale.is_displayed() and scale.text.split() == ["0", "1", "attention", "weight"]
        gradient = scale.find_element(By.CSS_SELECTOR, ".bar").value_of_css_property("background-image")
        assert gradient.index("rgb(255, 255, 255)") < gradient.index("rgb(0, 0, 255)"), gradient
        strongest = max(cells, key=lambda c: float(c.get_attribute("data-weight")))
        shade = round(255 * (1 - float(strongest.get_attribute("data-weight"))))
        assert strongest.value_of_css_property("background-color") in (f"rgb({shade}, {shade}, 255)",
                                                                       f"rgba({shade}, {shade}, 255, 1)")  # fmt: skip
        none = driver.find_element(By.CSS_SELECTOR, 'section[data-model="none"]')
        assert "no attention" in none.find_element(By.CSS_SELECTOR, ".note").text
        assert not none.find_elements(By.CSS_SELECTOR, "table.heatmap")
        assert driver.save_screenshot(str(tmp_path / "explorer.png"))
        assert (tmp_path / "explorer.png").stat().st_size > 10_000
        _check_readings(driver, column, expected.tgt_tokens)
        # an empty submission gets the page's message, not a request
        driver.find_element(By.ID, "text").clear()
        driver.find_element(By.ID, "submit").click()
        assert driver.find_element(By.ID, "message").text == "Type a sentence to translate."
    finally:
        driver.quit()
