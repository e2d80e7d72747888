"""The viewer in a real browser: headless Chromium (Debian's package, driven through its
chromedriver) against the daemon's own viewer. Screenshots of every page go to
``test-artifacts/viewer/`` (or ``$KIROLEARN_ARTIFACTS/viewer/``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import kl
from helpers.events import retrieval, wait_records
from helpers.waits import wait_for
from helpers.workspace import Workspace
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import Select, WebDriverWait
from test_viewer import claude, one_turn

from kirolearn import db, paths

ARTIFACTS = Path(os.environ.get("KIROLEARN_ARTIFACTS")
                 or Path(__file__).resolve().parent.parent / "test-artifacts") / "viewer"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):  # installed by the test setup: missing is a failure
        pytest.fail("the browser test needs Debian's chromium and chromium-driver"
                    " (tests/e2e/install-chromium installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000", f"--user-data-dir={tmp_path / 'chromium'}",
                 "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def shot(driver: webdriver.Chrome, name: str) -> None:
    path = ARTIFACTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), name
    assert path.stat().st_size > 5_000, f"{name}: an empty screenshot"


def logged(home: Path, prompt: str) -> bool:
    """Whether the retrieval for this prompt is logged (the page shows what is, when
    it is loaded)."""
    with db.reading(paths.Home(home).db_path) as conn:
        return conn.execute("SELECT 1 FROM retrievals r JOIN events e ON e.event_id ="
                            " r.prompt_event_id WHERE e.body_json LIKE $1",
                            (f"%{prompt}%",)).fetchone() is not None


def until(driver: webdriver.Chrome, condition, timeout: float = 15):
    return WebDriverWait(driver, timeout).until(condition)


def test_a_user_watches_searches_inspects_and_forgets_in_the_browser(daemon, tmp_path, browser):
    ws = Workspace(tmp_path)
    url = kl("open", "--url", check=True).stdout.strip()
    base = url.split("?")[0]

    browser.get(url)  # the token comes in the URL once, then lives in a cookie
    assert browser.current_url == base
    assert "token" not in browser.current_url
    cookie = browser.get_cookie("kirolearn_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert browser.find_element(By.TAG_NAME, "h1").text == "Overview"

    browser.get(base + "live")
    until(browser, ready.text_to_be_present_in_element((By.ID, "live-state"), "live"))
    claude(ws, "UserPromptSubmit", prompt="Add retries with backoff to the <b>zmq</b> client")
    arrived = until(browser, ready.presence_of_element_located(
        (By.CSS_SELECTOR, "#tail li.event.prompt .detail")))
    assert arrived.text == "Add retries with backoff to the <b>zmq</b> client"  # as text, escaped
    assert browser.find_elements(By.CSS_SELECTOR, "#tail b") == []
    one_turn(ws)
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tail li.event")) >= 5)
    tool = browser.find_element(By.CSS_SELECTOR, "#tail li.event.tool_use")
    assert "Bash" in tool.text and "failed (exit 1)" in tool.text
    shot(browser, "live")

    wait_records(ws.namespace)
    wait_for(lambda: len(retrieval("search", {"query": "retries backoff", "mode": "lexical",
                                              "namespace": ws.namespace})["record_ids"]) >= 2,
             message="the turn's records")
    browser.get(base + "memories")
    browser.find_element(By.NAME, "q").send_keys("backoff retries")
    Select(browser.find_element(By.NAME, "mode")).select_by_value("lexical")
    browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    until(browser, lambda d: d.execute_script(  # the search's page, read in one step of its own
        "return location.search.includes('q=backoff')"
        " && document.querySelectorAll('li.record a.title').length > 0"))
    titles = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "li.record a.title")]
    assert any(t.startswith("`pytest -q tests/test_retry.py` failed") for t in titles), titles
    shot(browser, "memories-search")

    shown = json.loads(claude(ws, "UserPromptSubmit", prompt="why does test_backoff fail"))
    injected = shown["hookSpecificOutput"]["additionalContext"]
    wait_for(lambda: logged(daemon, "why does test_backoff fail"), message="the retrieval log")
    browser.get(base + "retrievals")
    until(browser, lambda d: "why does test_backoff fail" in d.page_source)
    shot(browser, "retrievals")
    browser.find_element(By.CSS_SELECTOR, "table.retrievals tbody tr td a").click()
    context = until(browser, ready.presence_of_element_located((By.CSS_SELECTOR, "pre.context")))
    assert context.text == injected.strip()
    assert browser.find_element(By.CSS_SELECTOR, "h1 .outcome").text == "ok"
    shot(browser, "retrieval")

    first = browser.find_element(By.CSS_SELECTOR, "main ol li a")
    title = first.text
    first.click()
    until(browser, ready.text_to_be_present_in_element((By.TAG_NAME, "h1"), title))
    sources = browser.find_elements(By.CSS_SELECTOR, "a[href^='/events/']")  # its events
    assert sources
    record_url = browser.current_url
    browser.get(sources[0].get_attribute("href"))
    until(browser, ready.presence_of_element_located((By.CSS_SELECTOR, "pre.output")))
    assert browser.find_element(By.TAG_NAME, "h1").text.endswith("event")
    shot(browser, "event")
    browser.get(record_url)
    record_id = record_url.rsplit("/", 1)[1]
    shot(browser, "memory")

    browser.find_element(By.CSS_SELECTOR, "form.forget button").click()
    dialog = until(browser, ready.alert_is_present())
    assert "Forget" in dialog.text
    dialog.dismiss()  # cancelled: nothing happens
    assert browser.current_url == record_url
    browser.find_element(By.CSS_SELECTOR, "form.forget button").click()
    until(browser, ready.alert_is_present()).accept()
    notice = until(browser, ready.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
    assert notice.text == f"Forgot “{title}”."
    assert record_id not in retrieval("search", {"query": title, "mode": "lexical",
                                                 "namespace": ws.namespace})["record_ids"]
    browser.get(record_url)
    assert browser.find_element(By.TAG_NAME, "h1").text == "404"
    shot(browser, "forgotten")

    browser.get(base + "sessions")
    shot(browser, "sessions")
    browser.find_element(By.CSS_SELECTOR, "main table a").click()
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "li.turn")) >= 2)
    shot(browser, "session")
    browser.get(base)
    until(browser, ready.presence_of_element_located((By.CSS_SELECTOR, "svg.chart rect.bar")))
    shot(browser, "overview")

    problems = [entry["message"] for entry in browser.get_log("browser")
                if entry["level"] in ("SEVERE", "WARNING") and "404" not in entry["message"]]
    assert problems == []  # no CSP violation, no script error


AUTHORS = 210


def many_authors(repo: Path) -> None:
    """A repository of AUTHORS commits, each by another author, each adding a function
    to one module (written by git fast-import: one process)."""
    stream, text = [], ""
    for n in range(AUTHORS):
        text += f"def step_{n}(value):\n    return value + {n}\n\n"
        message = (f"Add step {n} to the widget pipeline\n\n"
                   f"Co-authored-by: Pat <pat{n}@example.com>\n")
        stream += [
            "commit refs/heads/main", f"mark :{n + 1}",
            f"author Author {n:03d} <author{n}@example.com> {1_700_000_000 + n * 3600} +0000",
            f"committer Author {n:03d} <author{n}@example.com> {1_700_000_000 + n * 3600} +0000",
            f"data {len(message.encode())}", message,
            *([f"from :{n}"] if n else []),
            "M 100644 inline src/widget.py", f"data {len(text.encode())}", text]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], check=True,
                   input="\n".join(stream) + "\n", text=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)


def test_a_history_of_many_authors_is_one_project_in_the_browser(daemon, tmp_path, browser):
    """A seeded history of 210 authors: one project in the picker, named by its folder;
    an Overview whose Contributors card names the busiest and counts the rest (the
    latency chart stays on the first screen); Memories searched under "All projects"
    and filtered by an author."""
    repo = tmp_path / "widget"
    many_authors(repo)
    kl("seed", "--git", "--project", str(repo), check=True)
    wait_for(lambda: json.loads(kl("stats", "--json", check=True).stdout)["totals"]["records"]
             >= AUTHORS, 90, 0.5, "a record of each commit")
    url = kl("open", "--url", check=True).stdout.strip()
    base = url.split("?")[0]
    browser.get(url)

    picker = Select(browser.find_element(By.NAME, "project"))
    assert [o.text for o in picker.options] == ["All projects", f"widget ({repo})"]
    contributors = browser.find_element(By.ID, "contributors")
    assert len(contributors.find_elements(By.CSS_SELECTOR, "li")) == 10
    assert f"and {AUTHORS - 10} more" in contributors.text
    assert browser.find_element(By.ID, "latency").location["y"] < 1000  # the first screen
    shot(browser, "overview-many-authors")

    browser.get(base + "memories?q=widget+pipeline+step")
    assert not browser.find_elements(By.CSS_SELECTOR, "p.error")
    assert browser.find_elements(By.CSS_SELECTOR, "li.record")
    authors = Select(browser.find_element(By.NAME, "author"))
    assert len(authors.options) == AUTHORS + 1  # "any author" and each of them
    shot(browser, "memories-many-authors")
    browser.get(base + "memories?author=Author+007")
    titles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "li.record a.title")]
    assert titles == ["Add step 7 to the widget pipeline"]  # no trailer, no address
