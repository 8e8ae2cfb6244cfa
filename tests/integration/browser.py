"""Headless Chromium on a real Airflow UI: a logged-in page for DOM checks, and screenshots kept
as test artifacts.

Debian's ``chromium`` and ``chromium-driver`` (one source package, so their versions match),
driven through that chromedriver by Selenium: nothing is downloaded at run time, since Selenium
Manager is never asked for a driver when its path is given. ``infra/packages.sh browser``
installs both (as root, with ``apt-get``; ``infra/test.sh`` runs it beside the first tests, and a
browser test waits for that install) and the ``dev`` extras bring Selenium. Without them a test
skips saying what to install; under CI (``CI=true``) it fails instead, so CI never passes without
the checks.

:class:`AirflowPage` wraps one browser logged in to one :class:`~airflow_stack.AirflowStack`
through the UI's own login form: :meth:`~AirflowPage.open`, the trigger form
(:meth:`~AirflowPage.open_trigger_form`, :meth:`~AirflowPage.open_section`,
:meth:`~AirflowPage.row`, :meth:`~AirflowPage.type_into`, :meth:`~AirflowPage.submit_trigger_form`,
which waits for the api-server's answer in the browser's network log)
and :meth:`~AirflowPage.screenshot`, which writes ``<artifacts>/browser/<name>.png``, where
``<artifacts>`` is ``$FFJOBS_TEST_ARTIFACTS`` (default ``.state/test-artifacts`` in the checkout).

Fixtures: ``airflow_page`` (on the session's ``airflow_api``: the UI and REST, no task runs) and
``airflow_stack_page`` (on ``airflow_stack``: DAG runs execute, e.g. up to a review task). Each
has a browser of its own: the two stacks share the host 127.0.0.1, and so would a browser's
cookies. Both are registered in ``conftest.py`` (one of each a session): a test names the one it
needs, and never imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_stack import DAG_ID, USERNAME, AirflowStack

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # chromium_paths() skips (fails under CI) saying what to install
    webdriver = None

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS_ENV = "FFJOBS_TEST_ARTIFACTS"
DEFAULT_ARTIFACTS = REPO / ".state" / "test-artifacts"
# The UI's first page fetches a few MB of JavaScript from the api-server and renders it: 5-10 s
# on a quiet two-core machine, several times that while other tests load it; a minute bounds a
# hang, not the expected time. Later steps (a section opening, a REST answer) take far less.
UI_TIMEOUT_S = 60.0
PAGE_LOAD_TIMEOUT_S = 120.0
PACKAGES_LOCK = Path("/run/lock/ffjobs-packages.lock")
"""What ``infra/packages.sh`` holds while it installs (``infra/test.sh`` starts it beside the
first tests)."""
# Tall enough for the trigger form with its largest section open, so a screenshot shows it all.
WINDOW_SIZE = (1280, 1400)
FIELD_ROOT = "ancestor::*[@data-scope='field' and @data-part='root'][1]"
DIALOG = "[data-scope='dialog'][data-part='content']"
_TRIGGER = re.compile(r"/api/v2/dags/[^/?]+/dagRuns/?(\?|$)")


def artifacts_dir() -> Path:
    """Where browser screenshots go: ``$FFJOBS_TEST_ARTIFACTS/browser`` (created)."""
    folder = Path(os.environ.get(ARTIFACTS_ENV) or DEFAULT_ARTIFACTS) / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_for_package_install() -> None:
    """Return once no ``infra/packages.sh`` is installing (at once when none ever ran here)."""
    with contextlib.suppress(FileNotFoundError), PACKAGES_LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)


def chromium_paths() -> tuple[str, str]:
    """Debian's chromium and its chromedriver; skip saying what is missing (fail under CI)."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        wait_for_package_install()  # they may be being installed right now
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [
        name for name, path in (("chromium", browser), ("chromium-driver", driver)) if not path
    ]
    if webdriver is None:
        missing.append("selenium (pip install -e '.[dev]')")
    if missing:
        message = (
            f"headless browser checks need {', '.join(missing)}: as root, apt-get install "
            "chromium chromium-driver fonts-dejavu-core (infra/test.sh installs everything)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert browser is not None and driver is not None
    return browser, driver


@contextlib.contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Selenium ``WebDriver`` of a new headless Chromium with its own temporary profile."""
    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",  # a container's small /dev/shm crashes tabs
        f"--window-size={WINDOW_SIZE[0]},{WINDOW_SIZE[1]}",
        "--force-prefers-reduced-motion",  # fewer animations between a click and a screenshot
        # no GPU process (software compositing draws the screenshots), and none of the browser's
        # own traffic (updates, sync, first-run pages) that a closed network refuses
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ):
        options.add_argument(argument)
    # the network log: which request the page sent and what the api-server answered
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        chrome.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
        yield chrome
    finally:
        chrome.quit()


class AirflowPage:
    """A browser logged in to ``stack``'s UI (call :meth:`login` first)."""

    def __init__(self, driver: Any, stack: AirflowStack):
        self.driver, self.stack = driver, stack
        self._triggers: dict[str, int | None] = {}  # request id -> status, of triggers sent

    # ------------------------------------------------------------------ navigation

    def login(self) -> AirflowPage:
        """Sign in through the UI's login form, as a person does."""
        self.driver.get(self.stack.url + "/")
        self.wait(lambda d: d.find_elements(By.NAME, "username"), "the login form")
        self.driver.find_element(By.NAME, "username").send_keys(USERNAME)
        self.driver.find_element(By.NAME, "password").send_keys(self.stack.password)
        self.driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        self.wait(lambda d: "/auth/login" not in d.current_url, "the login to go through")
        return self

    def open(self, path: str) -> None:
        """Load a UI page, ``path`` relative to the stack's URL (``/dags/<dag>``)."""
        self.driver.get(self.stack.url + path)

    def wait(self, condition: Callable[[Any], Any], what: str, timeout: float = UI_TIMEOUT_S):
        """Wait until ``condition(driver)`` is truthy and return it; fail naming ``what``."""
        return WebDriverWait(self.driver, timeout).until(
            condition, message=f"waited {timeout:.0f} s for {what} on {self.driver.current_url}"
        )

    def text_with(self, *parts: str, what: str) -> str:
        """The page's text once every one of ``parts`` is in it (pages render after loading)."""

        def shown(driver: Any) -> str | None:
            text = driver.find_element(By.TAG_NAME, "body").text
            return text if all(part in text for part in parts) else None

        return self.wait(shown, what)

    def visible(self, by: str, selector: str, what: str):
        """The first visible element ``selector`` finds, waiting for it."""

        def shown(driver: Any):
            return next((e for e in driver.find_elements(by, selector) if e.is_displayed()), None)

        return self.wait(shown, what)

    # ------------------------------------------------------------------ the trigger form

    def open_trigger_form(self, dag_id: str = DAG_ID):
        """Open the DAG's page and its Trigger dialog; return the dialog."""
        self.open(f"/dags/{dag_id}")
        self.visible(By.XPATH, "//button[@aria-label='Trigger Dag']", "the Trigger button").click()
        dialog = self.visible(By.CSS_SELECTOR, DIALOG, "the trigger dialog")
        self.wait(lambda d: dialog.find_elements(By.CSS_SELECTOR, "[name^='element_']"), "Params")
        return dialog

    def section_titles(self) -> list[str]:
        """The titles of the open dialog's sections (Airflow's own "Advanced Options" last)."""
        triggers = self.dialog().find_elements(By.CSS_SELECTOR, "[data-part='item-trigger']")
        return [trigger.text.strip() for trigger in triggers]

    def open_section(self, title: str):
        """Expand the dialog's section ``title`` (the others close) and return its content."""
        xpath = f".//button[@data-part='item-trigger'][normalize-space(.)='{title}']"
        trigger = self.dialog().find_element(By.XPATH, xpath)
        if trigger.get_attribute("aria-expanded") != "true":
            trigger.click()
        content = self.dialog().find_element(By.ID, trigger.get_attribute("aria-controls"))
        self.wait(lambda d: trigger.get_attribute("aria-expanded") == "true", f"{title!r} open")
        self.wait(lambda d: content.is_displayed() and _settled(content), f"{title!r} shown")
        return content

    def field_names(self, section) -> list[str]:
        """The Param names of the fields inside ``section``, in the order shown."""
        inputs = section.find_elements(By.CSS_SELECTOR, "[name^='element_']")
        return list(dict.fromkeys(e.get_attribute("name").removeprefix("element_") for e in inputs))

    def field(self, name: str):
        """The input of Param ``name`` (a hidden input for a dropdown)."""
        return self.dialog().find_element(By.NAME, f"element_{name}")

    def row(self, name: str) -> dict[str, Any]:
        """What the form shows of Param ``name``: ``label``, ``required``, ``help``, ``error``
        and ``text`` (all the row's visible text, e.g. a dropdown's chosen label)."""
        root = self.field(name).find_element(By.XPATH, FIELD_ROOT)

        def text(part: str) -> str:
            found = root.find_elements(By.CSS_SELECTOR, f"[data-part='{part}']")
            return " ".join(e.text.strip() for e in found)

        label = root.find_element(By.CSS_SELECTOR, "[data-part='label']")
        return {
            "label": label.text.replace("*", "").strip(),
            "required": label.get_attribute("data-required") is not None,
            "help": text("helper-text"),
            "error": text("error-text"),
            "text": root.text,
        }

    def type_into(self, name: str, text: str) -> str:
        """Replace what Param ``name``'s box holds with ``text``, leave the box (as a person
        tabbing on), and return what the box holds then."""
        box = self.field(name)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
        box.send_keys(text, Keys.TAB)
        return box.get_attribute("value")

    def submit_trigger_form(self) -> str:
        """Press the dialog's Trigger button and wait for the api-server's answer; return the
        refusal the dialog then shows (its error alert's text, which holds the answer's
        ``detail``), or ``""`` once the dialog closed on a DAG run made."""
        self._answers()  # forget answers to earlier requests
        # pressed from the keyboard: the toast of an earlier refusal may lie over the button
        submit = self.dialog().find_element(By.CSS_SELECTOR, "[data-testid='trigger-dag-submit']")
        submit.send_keys(Keys.ENTER)
        status, request_id = self.wait(lambda d: next(iter(self._answers()), None), "an answer")
        if status < 400:
            self.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, DIALOG), "the dialog to close")
            return ""
        body = self.driver.execute_cdp_cmd("Network.getResponseBody", {"requestId": request_id})
        detail = json.loads(body["body"])["detail"]
        alert = f"{DIALOG} [data-testid='error-alert']"

        def shown(driver: Any) -> str | None:
            texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, alert)]
            return next((text for text in texts if str(detail) in text), None)

        return self.wait(shown, f"the dialog to show the refusal {detail!r}")

    def _answers(self) -> list[tuple[int, str]]:
        """``(status, request id)`` of each answer to a trigger (a POST of a DAG run) that the
        browser finished receiving since the last call, from its network log."""
        answers = []
        for entry in self.driver.get_log("performance"):
            event = json.loads(entry["message"])["message"]
            method, params = event["method"], event.get("params", {})
            request_id = params.get("requestId")
            if method == "Network.requestWillBeSent":
                request = params["request"]
                if request["method"] == "POST" and _TRIGGER.search(request["url"]):
                    self._triggers[request_id] = None
            elif method == "Network.responseReceived" and request_id in self._triggers:
                self._triggers[request_id] = params["response"]["status"]
            elif method == "Network.loadingFinished" and request_id in self._triggers:
                answers.append((self._triggers.pop(request_id), request_id))
        return answers

    def dialog(self):
        return self.driver.find_element(By.CSS_SELECTOR, DIALOG)

    # ------------------------------------------------------------------ artifacts

    def screenshot(self, name: str, element: Any = None) -> Path:
        """Save ``element`` (the whole window if ``None``) as ``<artifacts>/browser/<name>.png``
        and return its path."""
        assert re.fullmatch(r"[a-z0-9-]+", name), f"screenshot name {name!r}: a-z, 0-9 and -"
        path = artifacts_dir() / f"{name}.png"
        # a toast (a few seconds long) would cover part of what the picture is for
        toasts = "[data-scope='toast'][data-part='root']"

        def faded(driver: Any) -> bool:
            return not any(_shown(t) for t in driver.find_elements(By.CSS_SELECTOR, toasts))

        self.wait(faded, "the toasts to fade")
        if element is None:
            self.driver.save_screenshot(str(path))
        else:
            element.screenshot(str(path))
        assert path.stat().st_size > 0, path
        return path


def _shown(element: Any) -> bool:
    """Whether ``element`` is on the page and displayed."""
    try:
        return element.is_displayed()
    except StaleElementReferenceException:
        return False


def _settled(element: Any) -> bool:
    """Whether ``element`` kept its size over a short while (an opening animation ended)."""
    before = element.size
    time.sleep(0.2)
    return element.size == before and before["height"] > 0


@contextlib.contextmanager
def logged_in_page(stack: AirflowStack) -> Iterator[AirflowPage]:
    """A browser of its own, logged in to ``stack``'s UI."""
    with headless_chromium() as driver:
        yield AirflowPage(driver, stack).login()


@pytest.fixture(scope="session")
def _airflow_api_browser(airflow_api: AirflowStack) -> Iterator[AirflowPage]:
    with logged_in_page(airflow_api) as page:
        yield page


@pytest.fixture(scope="session")
def _airflow_stack_browser(airflow_stack: AirflowStack) -> Iterator[AirflowPage]:
    with logged_in_page(airflow_stack) as page:
        yield page


@pytest.fixture
def airflow_page(_airflow_api_browser: AirflowPage) -> Iterator[AirflowPage]:
    """A browser logged in to the session's ``airflow_api`` (api-server and dag-processor),
    started once a session and left on a blank page after each test: an Airflow page left open
    keeps polling the api-server, a core's tenth for nothing."""
    yield _airflow_api_browser
    _airflow_api_browser.driver.get("about:blank")


@pytest.fixture
def airflow_stack_page(_airflow_stack_browser: AirflowPage) -> Iterator[AirflowPage]:
    """As :func:`airflow_page`, on the session's ``airflow_stack`` (all four components)."""
    yield _airflow_stack_browser
    _airflow_stack_browser.driver.get("about:blank")
