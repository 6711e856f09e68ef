"""The HTML report: what the page says is what the branch holds, in a real browser too."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.commands.land.landing import land_run
from gitrun.commands.report.charts import kind_class
from gitrun.commands.report.committed import read_committed
from gitrun.commands.report.page import COLOURS, render_page, render_report
from gitrun.commands.report.timeline import (
    KINDS,
    TIMED_OUT,
    Attempt,
    canary_attempts,
    concurrency_over_time,
    needless_reruns,
)
from gitrun.commands.session import start_run
from gitrun.definition.schema import Limits
from gitrun.store import ledger
from tests.helpers import build_tree, commit_all, git, git_env, run_gitrun, write_run

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

# -- reading the page back ----------------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, tag: str, **attrs: str) -> list[Node]:
        return [
            n
            for n in self.walk()
            if n.tag == tag and all(n.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())
        ]

    def one(self, tag: str, **attrs: str) -> Node:
        found = self.find(tag, **attrs)
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


VOID = {"meta", "input", "br", "img", "link", "hr"}


class PageParser(HTMLParser):
    """The page as a tree (stdlib only); fails on a tag closed out of order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(Node("#text", {}, text=data))


def parse(page: str) -> Node:
    parser = PageParser()
    parser.feed(page)
    parser.close()
    assert [n.tag for n in parser.stack] == ["#root"], "unclosed elements"
    return parser.root


def css_fills(page: Node) -> dict[str, str]:
    """class -> fill colour, from the page's style sheet."""
    style = page.one("style").all_text()
    return {m[1]: m[2] for m in re.finditer(r"\.([\w-]+)\{fill:(#[0-9a-f]{6})\}", style)}


def numbers(page: Node) -> dict[str, str]:
    out = {}
    for div in page.find("div"):
        if "num" in div.classes:
            out[div.attrs["data-key"]] = div.one("b").all_text()
    return out


def table(page: Node) -> dict[str, list[str]]:
    body = page.one("table", id="task-table").one("tbody")
    rows = {}
    for tr in body.find("tr"):
        cells = [td.all_text() for td in tr.find("td")]
        rows[cells[0]] = cells
    return rows


def bars(page: Node) -> list[Node]:
    svg = page.one("svg", id="timeline-chart")
    return [n for n in svg.walk() if n.tag == "rect" and "bar" in n.classes]


def expected_kind(record: dict[str, Any]) -> str:
    if record["outcome"] == ledger.ABANDONED:
        return "lost"
    if record["timed_out"] and record["outcome"] != ledger.VALID:
        return TIMED_OUT
    if record["outcome"] == ledger.INTERRUPTED:
        return "stopped"  # gitrun stopped it: Ctrl-C, `gitrun stop`
    return str(record["outcome"])


# -- a real run: one task per story ---------------------------------------------------------

WORKER = """
import os, sys, time
from pathlib import Path
task, attempt = os.environ["GITRUN_TASK"], int(os.environ["GITRUN_ATTEMPT"])
outputs = [p for p in os.environ["GITRUN_OUTPUTS"].split("\\n") if p]
def write(text):
    for p in outputs:
        Path(p).parent.mkdir(parents=True, exist_ok=True)
        Path(p).write_text(text)
valid = '{"task": "%s"}\\n' % task
if task == "t05":
    sys.exit(0)  # writes nothing, says it succeeded: fails for good
if attempt == 1 and task == "t03":
    write("{not json")
    sys.exit(0)
throttled = Path(__file__).with_name("t04.throttled")
if task == "t04" and not throttled.exists():
    throttled.touch()
    sys.exit(75)  # throttled once: its next try is attempt 1 again
if attempt == 1 and task == "t06":
    time.sleep(60)  # killed by the timeout
write(valid)
sys.exit(1 if task == "t02" else 0)  # t02 lies
"""


def make_finished_run(repo: Path) -> None:
    worker = repo.parent / "worker.py"
    worker.write_text(WORKER)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(1, 9)
    ]
    packet = {
        "run": {"id": "r", "description": "One task per story"},
        "executor": {"kind": "command", "command": [sys.executable, str(worker), "{pointer}"]},
        "limits": {
            "concurrency": 3,
            "canary": 1,
            "max_attempts": 2,
            "timeout": "2s",
            "kill_grace": "1s",
            "backoff_base": "0.05s",
            "backoff_cap": "0.1s",
        },
    }
    write_run(repo, "r", tasks, packet)
    assert start_run(repo, "r", lambda _line: None).exit_code == 1  # t05 failed for good


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One finished run for the module's tests (they only read it)."""
    from gitrun.engine import governor

    root = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith(("GIT_", "GITRUN_")):
                mp.delenv(key)
        for key, value in git_env(root).items():
            mp.setenv(key, value)
        mp.setattr(governor, "read_load", lambda: 0.0)
        repo = root / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        build_tree(repo, {"README.md": "# sample\n"})
        commit_all(repo, "initial")
        make_finished_run(repo)
        yield repo


def status_json(repo: Path, run: str = "r") -> dict[str, Any]:
    result = runner.invoke(app, ["-C", str(repo), "status", run, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def test_the_page_counts_what_status_json_counts(finished: Path) -> None:
    page = parse(render_report(finished, "r"))
    status = status_json(finished)
    counts = status["counts"]
    got = numbers(page)
    assert got["tasks"] == str(len(status["tasks"])) == "8"
    assert got["done"] == str(counts["done"]) == "7"
    assert got["failed"] == str(counts["failed"]) == "1"
    assert got["pending"] == str(counts["pending"] + counts["running"]) == "0"
    assert got["spawns"] == str(status["spawns"])
    assert got["usable"] == str(status["usable"])
    assert got["yield"] == f"{status['yield']:.0%}"
    assert got["needless"] == "1"  # t02 wrote valid output and exited 1
    assert got["throttles"] == "1"
    assert got["spent"] == got["tokens"] == "unknown"  # no client stated either, none is 0
    rows = table(page)
    assert list(rows) == list(status["tasks"])  # every task, in table order
    for tid, task in status["tasks"].items():
        assert rows[tid][1] == task["stage"]
        assert rows[tid][2] == str(len(task["records"]))
        assert rows[tid][3] == task["status"]
        assert rows[tid][4] == f"out/{tid}.json"


def test_one_bar_per_attempt_coloured_by_its_outcome(finished: Path) -> None:
    page = parse(render_report(finished, "r"))
    status = status_json(finished)
    records = {
        (tid, r["attempt"], r.get("throttles", 0)): r
        for tid, t in status["tasks"].items()
        for r in t["records"]
    }
    drawn = {
        (b.attrs["data-task"], int(b.attrs["data-attempt"]), int(b.attrs["data-throttles"])): b
        for b in bars(page)
    }
    assert set(drawn) == set(records)
    fills = css_fills(page)
    assert len(set(COLOURS.values())) == len(COLOURS) == len(KINDS)  # one colour each
    for key, bar in drawn.items():
        kind = expected_kind(records[key])
        assert bar.attrs["data-kind"] == kind
        assert fills[kind_class(kind)] == COLOURS[kind], key
        # The hover text names the attempt, its exit status and its reason.
        title = bar.one("title").all_text()
        again = f" (again, after {key[2]} throttled)" if key[2] else ""
        assert title.startswith(f"{key[0]} attempt {key[1]}{again}: {kind}")
        if records[key].get("exit") is not None:
            assert f"exit {records[key]['exit']}" in title
        assert records[key].get("reason", "")[:50] in title
    kinds = {k: drawn[k].attrs["data-kind"] for k in drawn}
    assert kinds[("t03", 1, 0)] == "invalid" and kinds[("t04", 1, 0)] == "throttled"
    assert kinds[("t04", 1, 1)] == "valid"  # the throttle used no attempt number
    assert kinds[("t05", 1, 0)] == kinds[("t05", 2, 0)] == "missing"
    assert kinds[("t06", 1, 0)] == TIMED_OUT and kinds[("t06", 2, 0)] == "valid"
    # The canary ran alone: the first task's first attempt, and only it.
    assert {k for k, b in drawn.items() if "canary" in b.classes} == {("t01", 1, 0)}
    assert {k for k, b in drawn.items() if "lied" in b.classes} == {("t02", 1, 0)}
    assert page.find("g", class_="canary-band")


def test_the_page_is_self_contained(finished: Path) -> None:
    text = render_report(finished, "r")
    page = parse(text)
    csp = page.one("meta", **{"http-equiv": "Content-Security-Policy"}).attrs["content"]
    assert "default-src 'none'" in csp
    for node in page.walk():
        for name in ("src", "href", "xlink:href", "action"):
            assert name not in node.attrs, (node.tag, node.attrs)
        assert node.tag not in ("link", "img", "iframe", "object")
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}


def test_the_table_names_the_commit_that_landed_each_task(finished: Path) -> None:
    rows = table(parse(render_report(finished, "r")))
    for tid, cells in rows.items():
        if cells[3] != "done":
            assert cells[5] == ""
            continue
        message = git(finished, "log", "-1", "--format=%B", cells[5])
        assert f"Gitrun-Task: {tid}" in message


def test_a_fresh_clone_and_a_landed_run_give_the_same_page(finished: Path, tmp_path: Path) -> None:
    original = render_report(finished, "r")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(finished), str(clone)], check=True)
    assert not (clone / ".gitrun").exists()  # the run lives only on origin/gitrun/r
    assert git(clone, "branch", "--list", "gitrun/r") == ""
    cloned = render_report(clone, "r")
    assert cloned == original.replace("<code>gitrun/r</code>", "<code>origin/gitrun/r</code>")
    git(clone, "branch", "gitrun/r", "origin/gitrun/r")
    land_run(clone, "r", partial=True)  # one task of eight failed
    assert (clone / "out/t01.json").is_file()
    assert render_report(clone, "r") == original


def test_the_report_reads_the_branch_not_the_disk(finished: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(finished), str(clone)], check=True)
    git(clone, "branch", "gitrun/r", "origin/gitrun/r")
    # Files on disk that say otherwise change nothing: a ledger, a packet, outputs.
    build_tree(
        clone,
        {
            ".gitrun/runs/r/packet.toml": "[run]\nid = 'r'\n[limits]\nmax_attempts = 9\n",
            ".gitrun/runs/r/ledger/0000/000001.jsonl": json.dumps(
                {"task": "t05", "attempt": 7, "outcome": "valid"}
            )
            + "\n",
            "out/t05.json": "{}\n",
        },
    )
    got = numbers(parse(render_report(clone, "r")))
    assert (got["done"], got["failed"]) == ("7", "1")


# -- the command ------------------------------------------------------------------------------


def test_report_without_a_path_writes_under_the_git_directory_and_says_where(
    finished: Path,
) -> None:
    """The page is local state of the run, like its logs: the work tree gets
    no untracked file, and the line printed is the path, to open."""
    before = git(finished, "status", "--porcelain", "--untracked-files=all")
    for where, said in ((finished, ".git/gitrun/r/report.html"), (finished / "out", None)):
        proc = run_gitrun(where, "report", "r")
        assert proc.returncode == 0, proc.stderr
        page = finished / ".git/gitrun/r/report.html"
        assert proc.stdout == f"{said or page}\n"  # relative where it is below, else whole
        assert page.read_text().startswith("<!DOCTYPE html>")
    assert git(finished, "status", "--porcelain", "--untracked-files=all") == before
    assert not list(finished.glob("**/gitrun-report-*"))


def test_report_command_writes_the_page_and_prints_its_path(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["-C", str(finished), "report", "r", "--html"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(finished / ".git/gitrun/r/report.html")
    assert not list(tmp_path.iterdir())
    target = tmp_path / "sub" / "page.html"
    result = runner.invoke(app, ["-C", str(finished), "report", "r", "--html", "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(target)
    assert target.stat().st_mode & 0o044 == 0o044 & ~_umask()  # shareable, not 0600


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_report_writes_html_without_being_told_the_only_format(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["-C", str(finished), "report", "r"])
    assert result.exit_code == 0, result.output
    assert Path(result.output.strip()).read_text().startswith("<!DOCTYPE html>")


def test_report_command_errors_are_one_sentence(git_repo: Path) -> None:
    result = runner.invoke(app, ["report", "nope"])
    assert result.exit_code == 1
    assert result.output.startswith("gitrun: error: run 'nope' has no branch gitrun/nope")
    assert len(result.output.strip().splitlines()) == 1
    assert runner.invoke(app, ["report", "Bad/Id", "--html"]).exit_code == 1


# -- a synthetic run of every outcome (bench/report.py builds it) ---------------------------


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic(repo: Path, tasks: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = bench_module().build(repo, tasks)
    return records


def test_every_outcome_has_its_colour_and_halts_are_marked(git_repo: Path) -> None:
    records = synthetic(git_repo, 40)
    page = parse(render_report(git_repo, "bench"))
    fills = css_fills(page)
    drawn = bars(page)
    assert len(drawn) == len(ledger.attempt_records(records))
    assert {b.attrs["data-kind"] for b in drawn} == set(KINDS)
    for bar in drawn:
        assert fills[kind_class(bar.attrs["data-kind"])] == COLOURS[bar.attrs["data-kind"]]
    for chart in ("timeline-chart", "concurrency-chart"):
        svg = page.one("svg", id=chart)
        markers = {n.attrs["class"] for n in svg.walk() if n.tag == "g" and "marker" in n.classes}
        assert {"marker halt", "marker lift", "marker takeover"} <= markers, chart
    # The halt was lifted: the summary does not say the run is halted.
    assert not [p for p in page.find("p") if "halted" in p.classes]
    got = numbers(page)
    failed = [t for t, s in read_committed(git_repo, "bench").status.items() if s == "failed"]
    assert got["failed"] == str(len(failed)) and "t0009" in failed
    assert got["needless"] == str(len(needless_reruns(records)))


def test_a_halt_not_lifted_is_said_in_the_summary(git_repo: Path) -> None:
    synthetic(git_repo, 12)
    run_dir = git_repo / ".gitrun/runs/bench"
    tip = git(git_repo, "rev-parse", "gitrun/bench").strip()
    # One more commit on the branch: a halt at the end of the ledger.
    git(git_repo, "checkout", "-q", tip)
    halt = {
        "event": "halt",
        "kind": "canary",
        "message": "canary failed: t0001",
        "at": "2027-01-16T00:00:00.000+00:00",
    }
    build_tree(run_dir, {"ledger/0000/000099.jsonl": json.dumps(halt) + "\n"})
    commit_all(git_repo, "halt")
    git(git_repo, "branch", "-f", "gitrun/bench", "HEAD")
    page = parse(render_report(git_repo, "bench"))
    said = [p.all_text() for p in page.find("p") if "halted" in p.classes]
    assert said == ["Halted: canary failed: t0001 (gitrun retry bench lifts it)"]


def test_rows_are_aggregated_above_the_threshold(git_repo: Path) -> None:
    synthetic(git_repo, 45)
    committed = read_committed(git_repo, "bench")
    page = parse(render_page(committed, max_rows=10))
    note = [p.all_text() for p in page.find("p") if "aggregated" in p.classes]
    assert note and "above 10 the timeline draws 5 consecutive tasks" in note[0]
    svg = page.one("svg", id="timeline-chart")
    rows = [n for n in svg.walk() if n.tag == "g" and "row" in n.classes]
    assert len(rows) == 9
    # Each row's hover text counts its attempts; together they count them all.
    counted = sum(
        int(n) for row in rows for n in re.findall(r"(\d+) [a-z]", row.one("title").all_text())
    )
    assert counted == len(ledger.attempt_records(committed.records))
    assert len(table(page)) == 45  # the table lists every task
    assert not note_of(parse(render_page(committed, max_rows=45)))


def note_of(page: Node) -> list[str]:
    return [p.all_text() for p in page.find("p") if "aggregated" in p.classes]


def test_ten_thousand_tasks_stay_under_five_megabytes(git_repo: Path) -> None:
    synthetic(git_repo, 10_000)
    text = render_report(git_repo, "bench")
    assert len(text.encode()) < 5_000_000
    assert text.count("<tr data-status=") == 10_000  # every task in the table
    assert 'class="aggregated"' in text


# -- the ledger's story, computed ------------------------------------------------------------


def attempt(task: str, start: float, end: float, outcome: str = "valid", **kw: Any) -> Attempt:
    fields: dict[str, Any] = {
        "number": 1,
        "stage": "work",
        "exit": 0,
        "signal": None,
        "reason": "",
        "concurrency": None,
        "recovered": False,
    }
    fields.update(kw)
    return Attempt(task=task, start=start, end=end, outcome=outcome, kind=outcome, **fields)


def test_concurrency_replays_the_governor_over_the_ledger() -> None:
    limits = Limits(concurrency=4, canary=1, grow_after=1, backoff_base=1.0, backoff_cap=8.0)
    attempts = [
        attempt("a", 0, 10),  # the canary, alone
        attempt("b", 10, 20),
        attempt("c", 10, 12, "throttled", exit=75, concurrency=2),
        attempt("d", 10, 30),
        attempt("e", 12.5, 14),  # started 0.5 s into the back-off's 1 s ceiling
        attempt("f", 14, 16),
    ]
    c = concurrency_over_time(attempts, limits, tasks=6)
    assert max(v for _, v in c.running) == 3
    assert dict(c.running)[10] == 3 and dict(c.running)[12] == 2
    assert c.allowed[0] == (0, 1)  # the canary alone
    assert (10, 4) in c.allowed  # the canary passed: the fan-out widens
    assert (12, 2) in c.allowed  # halved by the throttle, as the ledger says
    assert c.allowed[-1][1] == 3  # grown back to just under the ceiling the throttle found
    assert c.backoffs == [(12, 12.5)]  # its wait (two throttles long) cut short by the next start
    assert [a.task for a in c.throttles] == ["c"]
    assert canary_attempts(attempts, 1) == {("a", 1, 0)}
    assert canary_attempts(attempts, 0) == set()


def test_a_new_driver_starts_from_the_packets_concurrency() -> None:
    limits = Limits(concurrency=4, canary=1, grow_after=5)
    attempts = [
        attempt("a", 0, 1),
        attempt("b", 1, 2, "throttled", exit=75, concurrency=2),
        attempt("c", 1, 5, "abandoned", exit=None, recovered=True),  # found by the next driver
        attempt("e", 1, 5.001, "valid", exit=None, recovered=True),  # by the same one
        attempt("d", 6, 7),
        attempt("f", 6.5, 9, "abandoned", exit=None, recovered=True),  # by a third driver
    ]
    c = concurrency_over_time(attempts, limits, tasks=4)
    assert c.takeovers == [5, 9]
    assert (2, 2) in c.allowed and (5, 4) in c.allowed


def test_needless_reruns_are_valid_outputs_with_a_failing_exit() -> None:
    records: list[dict[str, Any]] = [
        {"task": "a", "attempt": 1, "outcome": "valid", "exit": 1},
        {"task": "b", "attempt": 1, "outcome": "valid", "exit": 0},
        {"task": "c", "attempt": 1, "outcome": "valid", "exit": None},
        {"task": "d", "attempt": 1, "outcome": "missing", "exit": 1},
        {"task": "a", "attempt": 2, "outcome": "valid", "exit": 2},
        {"event": "retry", "task": "e", "exit": 1, "outcome": "valid"},
    ]
    assert needless_reruns(records) == ["a"]


# -- in a real browser --------------------------------------------------------------------------


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class DevTools:
    """Chromium's DevTools protocol over --remote-debugging-pipe (fds 3 and 4)."""

    def __init__(self, exe: str, profile: Path) -> None:
        self._to_read, self._to_browser = os.pipe()
        self._from_browser, self._to_write = os.pipe()
        argv = [
            exe,
            "--headless",
            "--no-sandbox",  # root in containers; nothing here is untrusted
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # Above 4, so that moving them to 3 and 4 cannot overwrite one with the other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (self._to_read, self._to_write)]
        os.close(self._to_read)
        os.close(self._to_write)
        self._to_read, self._to_write = high
        move = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
        move += "os.execv(sys.argv[3], sys.argv[3:])"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", move, str(self._to_read), str(self._to_write), *argv],
            pass_fds=(self._to_read, self._to_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(self._to_read)
        os.close(self._to_write)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def send(self, method: str, deadline: float, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                assert "error" not in reply, reply
                result: dict[str, Any] = reply["result"]
                return result
            self.events.append(reply)

    def wait_for(self, method: str, deadline: float) -> None:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "chromium did not answer in time"
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                assert chunk, "chromium closed its pipe"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\0")
        data: dict[str, Any] = json.loads(line)
        return data

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait(timeout=30)
        os.close(self._to_browser)
        os.close(self._from_browser)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit PNG (stdlib zlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, width, height, channels = 8, b"", 0, 0, 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + size]
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
            assert body[8] == 8 and body[9] in (2, 6), "8-bit RGB or RGBA only"
            channels = 3 if body[9] == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + size
    raw, stride, rows = zlib.decompress(idat), width * channels, []
    prior = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = prior[i], prior[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                near = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + near) & 0xFF
        rows.append(bytes(line))
        prior = line
    return width, height, rows


@pytest.mark.skipif(
    chromium() is None, reason="chromium is not installed (apt-get install chromium)"
)
def test_the_page_renders_in_headless_chromium_without_errors(
    finished: Path, tmp_path: Path
) -> None:
    exe = chromium()
    assert exe is not None
    page = tmp_path / "report.html"
    page.write_text(render_report(finished, "r"))
    browser = DevTools(exe, tmp_path / "profile")
    deadline = time.monotonic() + 90
    try:
        target = browser.send("Target.createTarget", deadline, url="about:blank")
        attached = browser.send(
            "Target.attachToTarget", deadline, targetId=target["targetId"], flatten=True
        )
        browser.session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.send(f"{domain}.enable", deadline)
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            deadline,
            width=1200,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        browser.send("Page.navigate", deadline, url=page.as_uri())
        browser.wait_for("Page.loadEventFired", deadline)

        def evaluate(expression: str) -> Any:
            reply = browser.send(
                "Runtime.evaluate", deadline, expression=expression, returnByValue=True
            )
            assert "exceptionDetails" not in reply, reply
            return reply["result"].get("value")

        assert evaluate("document.querySelectorAll('#timeline-chart rect.bar').length") == 12
        # Sorting by attempts, twice: the most tried task comes first.
        first = "document.querySelector('#task-table tbody tr').cells"
        evaluate("document.querySelectorAll('#task-table th')[2].click()")
        assert evaluate(f"{first}[2].textContent") == "1"
        evaluate("document.querySelectorAll('#task-table th')[2].click()")
        assert evaluate(f"[{first}[0].textContent, {first}[2].textContent]") in (
            ["t03", "2"],
            ["t04", "2"],
            ["t05", "2"],
            ["t06", "2"],
        )
        box = evaluate(
            "(function(){var r=document.getElementById('timeline-chart')"
            ".getBoundingClientRect();return [r.x, r.y + window.scrollY, r.width, r.height];})()"
        )
        shot = browser.send(
            "Page.captureScreenshot",
            deadline,
            format="png",
            captureBeyondViewport=True,
            clip={"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1},
        )
        problems = [
            e
            for e in browser.events
            if e.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled")
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
        ]
        assert problems == []
    finally:
        browser.close()
    width, height, rows = png_pixels(base64.b64decode(shot["data"]))
    step = len(rows[0]) // width
    pixels = [row[i : i + 3] for row in rows for i in range(0, len(row), step)]
    assert width >= 400 and height >= 50
    inked = sum(1 for p in pixels if min(p) < 235)
    assert inked > len(pixels) // 50, "the screenshot is blank"
    # The bars are there in their colours: valid green, invalid red, throttled blue.
    for kind in ("valid", "invalid", "throttled", "missing"):
        want = bytes.fromhex(COLOURS[kind][1:])
        close = sum(
            1 for p in pixels if all(abs(a - b) <= 24 for a, b in zip(p, want, strict=True))
        )
        assert close >= 10, kind


def test_hostile_text_stays_text(git_repo: Path) -> None:
    import dataclasses

    synthetic(git_repo, 3)
    committed = read_committed(git_repo, "bench")
    evil = "</title></rect><script>alert(1)</script><rect"
    records = [dict(r) for r in committed.records]
    records[0]["reason"] = evil
    records.append({"event": "violation", "path": evil, "tasks": [evil], "at": "x"})
    records.append({"event": "halt", "kind": evil, "message": evil, "at": records[0]["ended"]})
    hostile = dataclasses.replace(committed, records=records, summary=ledger.summarize(records))
    page_text = render_page(hostile)
    page = parse(page_text)
    assert [n for n in page.walk() if n.tag == "script"] == [page.one("script")]  # ours only
    assert evil in page.one("svg", id="timeline-chart").all_text()  # shown, as text
    assert evil in page.one("section", id="summary").all_text()


def test_a_run_without_attempts_still_renders(git_repo: Path) -> None:
    import dataclasses

    synthetic(git_repo, 3)
    committed = read_committed(git_repo, "bench")
    empty = dataclasses.replace(committed, records=[], summary=ledger.summarize([]))
    page = parse(render_page(empty))
    assert bars(page) == []
    assert numbers(page)["spawns"] == "0" and numbers(page)["yield"] == "n/a"
    assert "no attempt yet" in page.one("header").all_text()
