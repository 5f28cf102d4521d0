"""The web view, in a real browser (Debian's Chromium through Selenium) against a real burst server
(SQLite, one process), with members' real command lines and a real local Ray run: signing in,
watching a run learn, its report, stopping its cluster with the button, the money page against
`burst costs --json`, and what another team and a teammate are refused."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from burst.home.state import RunRecord
from tests.support import browser, census
from tests.support.browser import shoot, text_of, wait_for
from tests.support.burst_server import Server, add_group
from tests.support.cli_runs import TRAIN, burst
from tests.support.slurm_site import needs

pytestmark = needs(browser.missing())
SHOTS = Path(os.environ["BURST_WEB_SCREENSHOTS"]) if os.environ.get("BURST_WEB_SCREENSHOTS") else None


@pytest.fixture
def site(tmp_path):
    """A server (its own SQLite) with team cern (alice, bob) and team atlas (carol), each member logged
    in from a state directory of their own; their tokens, for the browser's sign-in."""
    from burst.server import serve

    server = Server(tmp_path)
    server.data.mkdir(mode=0o700)
    tokens = add_group(serve.default_db(server.data), 50)
    server.start()
    homes = {}
    for who, token in tokens.items():
        homes[who] = tmp_path / f"{who}-machine"
        (tmp_path / f"{who}.token").write_text(token)
        burst("login", server.url, "--token-file", str(tmp_path / f"{who}.token"), home=homes[who], cwd=tmp_path, check=True)
    try:
        yield server, tokens, homes
    finally:
        server.stop()
        for member in (server.data / "users").glob("*"):
            if any((member / "clusters").glob("*.json")):
                burst("down", "--all", home=member, cwd=member, env={k: v for k, v in os.environ.items() if not k.startswith("BURST_")})


def sign_in(driver, server: Server, token: str) -> None:
    driver.get(server.url + "/signin")
    driver.find_element("id", "token").send_keys(token)
    driver.find_element("id", "signin").click()
    wait_for(lambda: text_of(driver, "who"), 30, "the sign-in did not reach a page with the user's name")


def shown(driver, element_id: str, timeout: float = 120) -> str:
    """The text of ``element_id`` once the page that has it is there (a click returns before a POST's
    answer has loaded: the server may be running a command for it)."""
    return wait_for(lambda: text_of(driver, element_id), timeout, f"no #{element_id} on the page")


def sign_out(driver) -> None:
    driver.find_element("css selector", "form.who button").click()
    wait_for(lambda: driver.current_url.endswith("/signin"), 30, "signing out did not go back to the sign-in form")


def posted(server: Server, path: str, cookie: str | None, form: dict) -> int:
    """A form POSTed outside the page (what another site or a script could send): its status."""
    from urllib.parse import urlencode

    request = urllib.request.Request(server.url + path, data=urlencode(form).encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **({"Cookie": f"burst_session={cookie}"}
                                                                                                     if cookie else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_token_signs_in_to_a_session_cookie_that_holds_no_secret_of_the_page_and_every_action_needs_its_csrf_secret(site, tmp_path):
    server, tokens, homes = site
    with browser.chromium() as driver:
        driver.get(server.url + "/ui/runs")
        assert driver.current_url.endswith("/signin")  # no session: the sign-in form, nothing else
        driver.find_element("id", "token").send_keys("burst_not-a-token")
        driver.find_element("id", "signin").click()
        assert "does not let you in" in shown(driver, "error")
        sign_in(driver, server, tokens["alice"])
        cookie = driver.get_cookie("burst_session")
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
        assert cookie["value"] != tokens["alice"]
        for page in ("/ui/clusters", "/ui/runs", "/ui/money", "/ui/plan"):
            driver.get(server.url + page)
            assert tokens["alice"] not in driver.page_source and tokens["alice"] not in driver.current_url
            assert cookie["value"] not in driver.page_source  # the page's script cannot read the session either
        # an action without the session's CSRF secret is refused, with the cookie or without it
        assert posted(server, "/ui/plan", cookie["value"], {"workload": "gan3d"}) == 403
        assert posted(server, "/ui/plan", cookie["value"], {"workload": "gan3d", "csrf": "guessed"}) == 403
        assert posted(server, "/ui/plan", None, {"workload": "gan3d"}) == 401
        # the plan form: the ranked candidates with their reasons, as `burst plan` gives them, run as alice
        driver.get(server.url + "/ui/plan")
        driver.find_element("id", "flags").send_keys("--gpus 8")
        driver.find_element("id", "plan").click()
        wait_for(lambda: text_of(driver, "why"), 60, "the plan form showed no choice")
        plan = burst("plan", "gan3d", "--gpus", "8", "--json", home=homes["alice"], cwd=tmp_path, check=True)
        assert text_of(driver, "why") == json.loads(plan.stdout)["why"], (text_of(driver, "why"), json.loads(plan.stdout)["why"])
        rows = driver.find_elements("css selector", "#candidates tbody tr")
        assert len(rows) == min(25, len(json.loads(plan.stdout)["candidates"])) and rows[0].text.startswith("1 ")
        shoot(driver, "web-plan", tmp_path / "shots", SHOTS)
        # a path on the server is not the form's to name
        driver.get(server.url + "/ui/plan")
        driver.find_element("id", "flags").send_keys("--catalog /etc/passwd")
        driver.find_element("id", "plan").click()
        assert "paste the policy into the form's policy box" in shown(driver, "error")
        # signing out ends the session on the server: the old cookie opens nothing
        sign_out(driver)
        assert posted(server, "/signout", cookie["value"], {"csrf": "x"}) == 401
        driver.add_cookie({"name": "burst_session", "value": cookie["value"], "path": "/"})
        driver.get(server.url + "/ui/clusters")
        assert driver.current_url.endswith("/signin")
        # a revoked token ends its sessions too
        sign_in(driver, server, tokens["bob"])
        server.admin("revoke", "bob")
        driver.get(server.url + "/ui/runs")
        assert driver.current_url.endswith("/signin")


@pytest.mark.slow
def test_a_member_watches_a_real_run_learn_cancels_and_resumes_it_opens_its_report_stops_its_cluster_and_others_are_refused(site, tmp_path):
    server, tokens, homes = site
    before = census.snapshot()
    policy = tmp_path / "priced.yaml"
    policy.write_text("providers: [local]\nlocal: {usd_per_hour: 72}\n")  # 2 cents a second: money the page can show
    server.admin("policy", str(policy))  # the site's prices are the admins' word
    up = burst("up", "--provider", "local", home=homes["alice"], cwd=tmp_path, check=True)
    assert "cluster local (local) started" in up.stderr + up.stdout
    train = burst("train", "gan3d", *TRAIN, "--epochs", "8", "--detach", home=homes["alice"], cwd=tmp_path, check=True)
    run_id = next(word for word in (train.stdout + train.stderr).split() if word.startswith("gan3d-"))
    shots = tmp_path / "shots"
    with browser.chromium() as driver:
        sign_in(driver, server, tokens["alice"])
        # the clusters page shows the cluster's utilisation as the job says it (its first look, as it starts)
        driver.get(server.url + "/ui/clusters")
        cell = driver.find_element("css selector", "tr[data-cluster='alice/local'] td.usage")
        wait_for(lambda: "CPU" in cell.text, 240, "the clusters page never showed the run's usage")
        shoot(driver, "web-clusters", shots, SHOTS)
        driver.get(server.url + "/ui/runs")
        driver.find_element("link text", run_id).click()
        assert shown(driver, "state") in ("PENDING", "RUNNING")
        # the page follows the run as it learns: each epoch's loss appears as the job says it (the page
        # looks every few seconds, the job may finish an epoch faster: the first epoch the page shows)
        def epoch_shown() -> int:
            words = text_of(driver, "epoch").split(" / ")
            return int(words[0]) if len(words) == 2 and words[0].isdigit() and text_of(driver, "loss").startswith("g_loss ") else 0
        seen = wait_for(epoch_shown, 240, "no epoch ever showed", context=lambda: text_of(driver, "facts"))
        first = text_of(driver, "loss")
        wait_for(lambda: epoch_shown() > seen and text_of(driver, "loss") != first, 120, "no later epoch showed",
                 context=lambda: text_of(driver, "facts"))
        second = text_of(driver, "loss")
        assert first.startswith("g_loss ") and second.startswith("g_loss ") and first != second
        assert len(driver.find_elements("css selector", "#chart polyline")) == 1
        assert text_of(driver, "cost").startswith("$") and text_of(driver, "forecast").startswith("$")
        shoot(driver, "web-run", shots, SHOTS)
        # the owner cancels it (it checkpoints where it is and stops, the cluster kept) and resumes it from there
        assert text_of(driver, "state") == "RUNNING" and text_of(driver, "epoch") != "8 / 8"
        driver.find_element("id", "cancel").click()
        assert "Cancel run" in shown(driver, "question")
        driver.find_element("id", "confirm").click()
        assert "asked to checkpoint and stop" in shown(driver, "said")
        driver.find_element("id", "back").click()
        wait_for(lambda: text_of(driver, "state") == "STOPPED", 180, "the cancelled run never showed STOPPED")
        stopped_at = text_of(driver, "step")

        def recorded() -> bool:  # the run's own follower records it: the page, rendered again, offers Resume
            driver.refresh()
            return bool(driver.find_elements("id", "resume"))
        wait_for(recorded, 120, "the cancelled run was never recorded stopped", every=3)
        assert "cancelled at epoch" in driver.page_source, driver.page_source[-3000:]
        driver.find_element("id", "resume").click()
        driver.find_element("id", "confirm").click()
        said = shown(driver, "said")
        assert f"run {run_id}" in said and "resum" in said.lower(), said
        driver.find_element("id", "back").click()
        # finished: the state, the physics summary and the report, collected by the server as alice
        wait_for(lambda: text_of(driver, "state") == "SUCCEEDED", 300, "the run never showed SUCCEEDED")
        wait_for(lambda: driver.find_elements("css selector", "#physics tr"), 30, "no physics after validation")
        assert "sampling fraction MC" in text_of(driver, "validation")
        driver.find_element("id", "report-link").click()
        assert "report" in driver.title.lower() or driver.find_elements("css selector", "img[alt='sampling_fraction']")
        assert driver.find_elements("css selector", "img[alt='profiles']")
        shoot(driver, "web-report", shots, SHOTS)
        # `burst report` through the server names the same page; another team's member is told there is no such run
        said = burst("report", run_id, home=homes["alice"], cwd=tmp_path, check=True).stdout
        assert said.startswith(f"{server.url}/ui/runs/{run_id}/report/report.html")
        refused = burst("report", run_id, home=homes["carol"], cwd=tmp_path)
        assert refused.returncode == 1 and f"no run {run_id!r}" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        # the money page says what `burst costs --json` says, line for line
        driver.get(server.url + "/ui/money")
        costs = json.loads(burst("costs", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout)
        by_key = {row.get_attribute("data-key"): row for row in driver.find_elements("css selector", "#teams tbody tr")}
        assert set(by_key) == {line["key"] for line in costs["lines"]} == {"cern"}
        (line,) = costs["lines"]
        row = by_key["cern"]
        spent_page = float(row.find_element("css selector", ".spent").text)
        assert line["spent_usd"] > 0.5 and 0 <= line["spent_usd"] - spent_page <= 0.02 * 30  # the cluster runs on between the two looks
        assert float(row.find_element("css selector", ".left").text) == pytest.approx(line["left_usd"], abs=0.02 * 30)
        assert row.find_element("css selector", ".budget").text == "50.00"
        assert len(driver.find_elements("css selector", "#chart-box svg rect.spent")) >= 1
        shoot(driver, "web-money", shots, SHOTS)
        # a teammate sees the cluster but may not stop it; another team does not see it or the run at all
        sign_out(driver)
        sign_in(driver, server, tokens["bob"])
        driver.get(server.url + "/ui/clusters")
        row = driver.find_element("css selector", "tr[data-cluster='alice/local']")
        assert not row.find_elements("link text", "Stop")
        driver.get(server.url + "/ui/clusters/alice/local/stop")
        assert "only they or an admin may stop it" in driver.page_source
        sign_out(driver)
        sign_in(driver, server, tokens["carol"])
        driver.get(server.url + "/ui/runs")
        assert run_id not in driver.page_source and text_of(driver, "none") == "No run yet."
        driver.get(server.url + f"/ui/runs/{run_id}")
        assert f"no run {run_id!r}" in driver.page_source.replace("&#x27;", "'").replace("&#39;", "'")
        driver.get(server.url + "/ui/clusters")
        assert "alice/local" not in driver.page_source
        sign_out(driver)
        # the owner stops the cluster with the button, after the confirmation
        sign_in(driver, server, tokens["alice"])
        driver.get(server.url + "/ui/clusters")
        driver.find_element("css selector", "tr[data-cluster='alice/local']").find_element("link text", "Stop").click()
        assert "Stop cluster local of alice?" in shown(driver, "question")
        driver.find_element("id", "confirm").click()

        def gone() -> bool:
            driver.get(server.url + "/ui/clusters")
            return text_of(driver, "none") == "No cluster is running."
        wait_for(gone, 120, "the cluster was still listed after its stop", every=2)
    status = json.loads(burst("status", "--json", home=homes["alice"], cwd=tmp_path, check=True).stdout)
    assert status["clusters"] == []
    record = RunRecord.model_validate_json(next((server.data / "users").glob(f"*/runs/{run_id}.json")).read_text())
    assert record.state == "SUCCEEDED" and Path(record.run_dir).is_relative_to(server.data / "users")  # results in alice's own directory
    assert record.attempts == 2 and stopped_at  # trained on from where the cancel stopped it
    census.assert_none_left(before)  # the cluster, the run's controller and the browser: gone
