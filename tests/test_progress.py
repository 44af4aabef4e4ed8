"""Progress of long phases: the phase contract, the CLI's two ways of showing it, and the long
work that reports through it (a build's steps, generation, verification, training steps)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console
from typer.testing import CliRunner

from lake.progress import PhaseStatus, phase, watching


class Recorder:
    """A reporter that keeps every event as (event, name, depth, done, total, note)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int, int | None, str]] = []

    def _add(self, event: str, s: PhaseStatus) -> None:
        self.events.append((event, s.name, s.depth, s.done, s.total, s.note))

    def opened(self, status: PhaseStatus) -> None:
        self._add("opened", status)

    def advanced(self, status: PhaseStatus) -> None:
        self._add("advanced", status)

    def closed(self, status: PhaseStatus) -> None:
        self._add("closed", status)

    def named(self, prefix: str) -> list[tuple[str, str, int, int, int | None, str]]:
        return [e for e in self.events if e[1].startswith(prefix)]


def test_phases_nest_report_and_close_even_on_error() -> None:
    recorder = Recorder()
    with watching(recorder):
        with phase("outer", 2, "steps") as outer:
            with phase("inner", 3) as inner:
                inner.advance(2, note="half")
                inner.advance()
            outer.advance()
        with pytest.raises(RuntimeError), phase("broken"):
            raise RuntimeError("boom")
        with phase("after") as after:
            after.update(5)
    assert recorder.events == [
        ("opened", "outer", 0, 0, 2, ""),
        ("opened", "inner", 1, 0, 3, ""),
        ("advanced", "inner", 1, 2, 3, "half"),
        ("advanced", "inner", 1, 3, 3, "half"),
        ("closed", "inner", 1, 3, 3, "half"),
        ("advanced", "outer", 0, 1, 2, ""),
        ("closed", "outer", 0, 1, 2, ""),
        ("opened", "broken", 0, 0, None, ""),
        ("closed", "broken", 0, 0, None, ""),
        ("opened", "after", 0, 0, None, ""),
        ("advanced", "after", 0, 5, None, ""),
        ("closed", "after", 0, 5, None, ""),
    ]
    with phase("nobody watches") as unseen:  # outside `watching`: counted, shown nowhere
        unseen.advance(3)
    assert unseen.status.done == 3 and len(recorder.events) == 12


def test_rate_eta_and_the_words_a_log_line_uses() -> None:
    from cli.progress import describe, duration

    assert [duration(s) for s in (4.4, 65, 3725)] == ["4s", "1m05s", "1h02m"]
    status = PhaseStatus("generate math", total=100, unit="samples", depth=0, started=0.0)
    status.done, status.note = 25, "900 tok/s"
    assert status.rate(now=10.0) == 2.5 and status.eta_seconds(now=10.0) == 30.0
    assert describe(status, now=10.0) == (
        "generate math 25/100 samples (2.50 samples/s, eta 30s, 900 tok/s)"
    )
    steps = PhaseStatus("build x", total=5, unit="steps", depth=0, started=0.0, estimate=False)
    steps.done = 1
    assert steps.eta_seconds(now=10.0) is None
    assert describe(steps, now=70.0) == "build x 1/5 steps (1m10s)"  # no rate for unequal steps
    waiting = PhaseStatus("load m", total=None, unit="models", depth=1, started=0.0)
    assert describe(waiting, now=3.0) == "load m (3s)"


def test_log_lines_name_every_open_phase_and_long_phases_when_they_end() -> None:
    from cli.progress import LogLines

    lines: list[str] = []
    reporter = LogLines(0.0, lines.append)  # not entered: no beat thread, beats by hand
    reporter.beat()
    assert lines == []  # nothing open, nothing said
    with watching(reporter), phase("build demo", 3, "steps", estimate=False) as build:
        build.advance()
        with phase("verify math", 10) as verify:
            verify.advance(4, note="3 passed")
            reporter.beat()
    assert re.fullmatch(
        r"\[\s*\d+s\] build demo 1/3 steps \(\d+s\) > verify math 4/10 rows "
        r"\([\d.,]+ rows/s, eta \d+s, 3 passed\)",
        lines[0],
    ), lines[0]
    assert lines[1].endswith("in 0s") and "done: verify math 4/10 rows" in lines[1]
    assert "done: build demo 1/3 steps" in lines[2]


def test_log_lines_beat_on_their_own_thread() -> None:
    import time

    from cli.progress import LogLines

    lines: list[str] = []
    with LogLines(0.01, lines.append) as reporter, watching(reporter), phase("waiting"):
        deadline = time.monotonic() + 5
        while not any("waiting" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert any(line.endswith(("] waiting (0s)", "] waiting (1s)")) for line in lines), lines


def test_live_display_shows_nested_phases_in_a_terminal() -> None:
    from cli.progress import LiveProgress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with (
        LiveProgress(console) as live,
        watching(live),
        phase("build demo", 2, "steps") as build,
        phase("generate x", 4, "samples") as gen,
    ):
        gen.advance(2, note="10 tok/s")
        live._progress.refresh()
        shown = out.getvalue()
        build.advance()
    assert "build demo" in shown and "  generate x" in shown and "2/4 samples" in shown
    assert live._tasks == {}  # every row left with its phase


def test_a_build_without_a_terminal_logs_its_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.main import command_app

    monkeypatch.setenv("CASCADE_PROGRESS_SECONDS", "0.001")
    args = ["--lake", str(tmp_path / "lake"), "build", "dataset", "math_rl_v2"]
    result = CliRunner().invoke(command_app(), [*args, "--profile", "demo"])
    assert result.exit_code == 0, result.output
    assert re.search(r"\] build math_rl_v2 \d+/\d+ steps .*> step \w+ \(", result.stderr)
    assert re.search(
        r"\] done: build math_rl_v2 (\d+)/\1 steps \(last: \w+ \d+ -> \d+ rows, ", result.stderr
    )
    assert "\x1b[" not in result.stderr  # plain lines, no cursor control
    quiet = CliRunner().invoke(command_app(), ["--quiet", *args, "--profile", "demo"])
    assert quiet.exit_code == 0 and "build math_rl_v2" not in quiet.stderr
    monkeypatch.setenv("CASCADE_PROGRESS_SECONDS", "soon")
    bad = CliRunner().invoke(command_app(), [*args, "--profile", "demo"])
    assert bad.exit_code != 0
    assert "CASCADE_PROGRESS_SECONDS must be a positive number, got 'soon'" in str(bad.exception)


def test_verification_reports_rows_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    from curation.verify import table

    monkeypatch.setattr(table, "VERIFY_CHUNK_ROWS", 2)
    df = pl.DataFrame(
        {"response": ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "no", "\\boxed{6}"]}
    ).with_columns(answer=pl.Series(["2", "3", "5", "5", "6"]))
    recorder = Recorder()
    with watching(recorder):
        scored = table.verify_frame(df, "math")
    assert scored.get_column("passed").to_list() == [True, True, False, False, True]
    assert [e[3:] for e in recorder.named("verify math") if e[0] == "advanced"] == [
        (2, 5, "2 passed"),
        (4, 5, "2 passed"),
        (5, 5, "3 passed"),
    ]


class Echo:
    """A backend that answers every request at once with a fixed reply."""

    def __init__(self, model: str) -> None:
        self.model = self.name = model

    def generate(self, requests):  # noqa: ANN001, ANN201
        from schemas.generation import Completion

        for r in requests:
            yield Completion(
                key=r.key,
                text="<think>x</think>4",
                prompt_tokens=3,
                completion_tokens=5,
                finish_reason="stop",
            )

    def close(self) -> None:
        pass


def test_generation_reports_loading_and_samples(tmp_path: Path) -> None:
    from curation.generate import SamplingParams, Teacher, generate_to_lake
    from curation.generate.plan import prompts_from_records
    from lake.catalog import Lake

    recorder = Recorder()
    records = [{"id": f"p{i}", "problem": f"{i} + 1?"} for i in range(3)]
    prompts = prompts_from_records(records, origin="test")
    with watching(recorder):
        report = generate_to_lake(
            Lake(tmp_path / "lake", create=True),
            prompts,
            output="gens",
            teacher=Teacher("scripted-model"),
            backend="hf",
            modes=["think"],
            k=2,
            sampling=SamplingParams(max_new_tokens=8),
            backend_factory=Echo,
        )
    assert report.generated == 6
    assert [e[0] for e in recorder.named("load scripted-model")] == ["opened", "closed"]
    samples = recorder.named("generate gens (scripted-model)")
    assert samples[-1][0] == "closed" and samples[-1][3:5] == (6, 6)
    assert re.fullmatch(r"[\d,]+ tok/s", samples[-1][5])


def test_training_steps_are_a_phase_that_resumes_where_it_was(tmp_path: Path) -> None:
    from training.step_log import StepLog

    recorder = Recorder()
    with watching(recorder), StepLog(tmp_path, "sft", 4, 2, rank=0) as log:
        log.write({"step": 3, "loss": 0.5})
        log.write({"step": 4})
    assert [e[0::3] for e in recorder.named("train sft")] == [
        ("opened", 0),
        ("advanced", 2),
        ("advanced", 3),
        ("advanced", 4),
        ("closed", 4),
    ]
    assert recorder.named("train sft")[2][5] == "loss 0.5000"
    with watching(recorder), StepLog(tmp_path, "other", 4, 0, rank=1) as log:
        log.write({"step": 1, "loss": 0.5})
    assert recorder.named("train other") == []  # only rank 0 reports
