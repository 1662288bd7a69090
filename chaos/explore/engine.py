"""``chaos explore``: run a target under generated fault schedules, shrink a failure, write it down.

Jepsen runs a system under generated fault schedules and checks the history; Hypothesis generates
inputs and shrinks a failing one to a minimal example (MacIver & Donaldson, "Test-Case Reduction via
Test-Case Generation", ECOOP 2020). Here every example is a real run of the target under a schedule
drawn by :func:`chaos.strategies.schedules`; a schedule *fails* when one of the held checks returns
``failed`` (``unknown`` is reported, not a failure). Hypothesis's :func:`~hypothesis.find` drives the
search and the shrinking; its example database (``$CHAOS_CACHE_DIR/hypothesis``) keeps a failure's
minimal schedule, so the next exploration of the same target tries it first.

Runs are memoised by schedule: a schedule the search draws twice is run once. The runs themselves are
an :class:`~chaos.explore.runs.ExampleRunner`'s (real torchrun jobs by default).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, Protocol

import hypothesis.core as hypothesis_core
import hypothesis.internal.conjecture.engine as conjecture_engine
from hypothesis import Verbosity, find, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import NoSuchExample

from chaos.checks import CHECKS
from chaos.errors import ChaosError, StrategyError
from chaos.explore.examples import Example, ExploreResult
from chaos.explore.minimal import write_minimal
from chaos.explore.runs import ExampleRunner, RealRunner
from chaos.history import Event
from chaos.paths import cache_dir, default_runs_dir
from chaos.run.reference import reference_key
from chaos.safedir import ensure_runs_dir
from chaos.scenario import CheckSpec, Scenario
from chaos.strategies.families import KINDS, resolve
from chaos.strategies.schedules import Schedule, schedules
from chaos.strategies.shape import TargetShape
from chaos.warm.agents import session as warm_session

DATABASE_VERSION = 1  # bump when the strategies change how they draw, so old entries are not misread
# Hypothesis stops shrinking after MAX_SHRINKING_SECONDS (300 s) of wall clock, which a handful of real
# torchrun shrink runs (20-80 s each on a busy machine) spend: the "minimal" schedule would then depend on
# how busy the machine was. chaos bounds shrinking by runs (shrink_runs) instead; the constant is
# monkeypatchable by Hypothesis's design, and is set back after the search.
SHRINK_WALL_CLOCK_S = 7 * 24 * 3600


@contextlib.contextmanager
def shrink_by_runs() -> Iterator[None]:
    """Within it, Hypothesis's shrinker has :data:`SHRINK_WALL_CLOCK_S` of wall clock instead of its 300 s."""
    wall = conjecture_engine.MAX_SHRINKING_SECONDS
    conjecture_engine.MAX_SHRINKING_SECONDS = SHRINK_WALL_CLOCK_S
    try:
        yield
    finally:
        conjecture_engine.MAX_SHRINKING_SECONDS = wall


class ExploreObserver(Protocol):
    """What a progress display is told (all optional to act on)."""

    def started(self, explorer: Explorer) -> None: ...
    def example_started(self, example: Example) -> None: ...
    def run_event(self, event: Event) -> None: ...
    def example_done(self, example: Example) -> None: ...


class _Stop(BaseException):
    """Ends the search from inside Hypothesis (a BaseException, so Hypothesis does not take it for a
    failing example)."""

    def __init__(self, why: str, error: BaseException | None = None) -> None:
        super().__init__(why)
        self.why, self.error = why, error


class Explorer:
    """Searches schedules of ``scenario``'s target for one that fails a held check.

    ``families``, ``max_faults``: as :func:`chaos.strategies.schedules`. Budget: ``max_examples``
    schedules generated (each a real run) and/or ``max_minutes`` of searching; then up to
    ``shrink_runs`` real runs to shrink a failure. ``seed``: the search's seed (default: random,
    reported). ``checks``: the checks to hold (default: the scenario's). ``database``: use
    Hypothesis's example database. ``runner``: what makes the runs (default :class:`~chaos.explore.runs.RealRunner`,
    real torchrun jobs). ``clock``: seconds (wall clock by default) for the time budget and each
    example's ``seconds``. ``launcher``: how the runs start their workers (``target.launcher``);
    default: the scenario's if it sets one, else ``warm`` (see :mod:`chaos.warm`). Raises
    :class:`~chaos.errors.StrategyError` for a bad argument
    (naming it and its CLI flag), :class:`~chaos.errors.CapabilityError`
    if this machine cannot run a fault family asked for — all before any run.
    """

    def __init__(self, scenario: Scenario, *, families: Iterable[str] | None = None, max_faults: int = 3,
                 max_examples: int | None = 30, max_minutes: float | None = None, shrink_runs: int = 30,
                 seed: int | None = None, checks: list[str] | None = None, runs_dir: Path | None = None,
                 database: bool = True, reference: bool = True, observer: ExploreObserver | None = None,
                 runner: ExampleRunner | None = None, clock: Callable[[], float] = time.time,
                 launcher: Literal["cold", "warm"] | None = None) -> None:
        if max_examples is None and max_minutes is None:
            raise StrategyError("budget: give max_examples (--examples N) or max_minutes (--minutes M)")
        if max_examples is not None and max_examples < 1:
            raise StrategyError(f"examples={max_examples} (--examples): give at least 1 example")
        if max_minutes is not None and max_minutes <= 0:
            raise StrategyError(f"minutes={max_minutes} (--minutes): give a positive number of minutes")
        if shrink_runs < 0:
            raise StrategyError(f"shrink_runs={shrink_runs} (--shrink-runs): give 0 (no shrinking) or more runs")
        if max_faults == 0:
            raise StrategyError("max_faults=0 (--max-faults): a schedule needs at least 1 fault; give 1 or more")
        held = checks if checks is not None else scenario.check_names()
        unknown = [c for c in held if c not in CHECKS]
        if unknown:
            raise StrategyError(f"checks (--checks): unknown check(s) {unknown}; use some of {', '.join(CHECKS)}")
        params = {c.name: c.params for c in scenario.checks}
        self.base = scenario.model_copy(update={"checks": [CheckSpec(name=c, params=params.get(c, {})) for c in held]})
        self.base._source = scenario._source
        # the runs start their workers warm unless the scenario (or --launcher) says how; the minimal
        # failing scenario written at the end keeps the scenario's own launcher
        self.launcher = launcher or (scenario.target.launcher if "launcher" in scenario.target.model_fields_set
                                     else "warm")
        self._run_base = self.base.model_copy(
            update={"target": self.base.target.model_copy(update={"launcher": self.launcher})})
        self._run_base._source = scenario._source
        self.held = list(held)
        self.families, self.max_faults = families, max_faults
        self.max_examples, self.max_minutes, self.shrink_runs = max_examples, max_minutes, shrink_runs
        self.seed = seed if seed is not None else secrets.randbits(32)
        self.database, self.reference, self.observer = database, reference, observer
        self.runner: ExampleRunner = runner if runner is not None else RealRunner()
        self.clock = clock
        self.command: str | None = None  # the command line that started this search, if any (the CLI's)
        self.shape = TargetShape.of(self.base)
        self.kinds = resolve(families, self.shape)  # StrategyError now, not at the first draw
        schedules(self.shape, max_faults=max_faults, families=families)  # validates max_faults
        stamp = time.strftime("%Y%m%d-%H%M%S")
        root = (Path(runs_dir) if runs_dir else default_runs_dir()).absolute()  # the replay works from anywhere
        self.out_dir = root / f"explore-{scenario.name}-{stamp}-{secrets.token_hex(2)}"
        self.examples: list[Example] = []
        self.reference_note = ""
        self._memo: dict[str, Example] = {}
        self._first_failure: Example | None = None
        self._shrink_spent = False
        self.repeats = 0  # schedules drawn again (answered from the memo, not run)
        self._t0 = 0.0

    # -- the search -----------------------------------------------------------------------------

    def run(self) -> ExploreResult:
        """Search, shrink, write the minimal failing scenario. KeyboardInterrupt if interrupted."""
        self._preflight()
        ensure_runs_dir(self.out_dir.parent)  # checked before anything is made (RunsDirError: exit 2)
        self.out_dir.mkdir(exist_ok=False)
        self.shape = self._observed_shape()
        self._t0 = self.clock()  # the budget counts from here, after the reference run
        strategy = schedules(self.shape, max_faults=self.max_faults, families=self.families)
        budget = self.max_examples if self.max_examples is not None else 10_000
        db = DirectoryBasedExampleDatabase(str(cache_dir() / "hypothesis")) if self.database else None
        # derandomize=False: under CI=true Hypothesis loads its "ci" profile, which derandomizes and so
        # would drop the seed: the same --seed must make the same search in a user's CI as on their laptop.
        conf = settings(max_examples=budget, deadline=None, database=db, report_multiple_bugs=False,
                        verbosity=Verbosity.quiet, derandomize=False)
        if self.observer:
            self.observer.started(self)
        stopped = "budget of examples spent" if self.max_examples is not None else "time budget spent"
        minimal: Example | None = None
        # The seed goes in as pytest's --hypothesis-seed does: find(random=...) applies @seed, which turns
        # the example database off, and the database is what makes a found failure come back first.
        forced, hypothesis_core.global_force_seed = hypothesis_core.global_force_seed, self.seed  # type: ignore[assignment]
        try:
            with shrink_by_runs(), warm_session():
                found = find(strategy, self._fails, settings=conf, database_key=self.database_key())
            minimal = self._memo[found.key()]
            stopped = (f"shrink budget of {self.shrink_runs} run(s) spent" if self._shrink_spent
                       else "shrunk to a minimal failing schedule")
        except NoSuchExample:
            pass
        except _Stop as stop:
            if stop.error is not None:
                raise stop.error from None
            stopped = stop.why
        finally:
            hypothesis_core.global_force_seed = forced
        path = None
        if minimal is not None:
            if minimal.result is not None:
                self.runner.report(minimal.result)
            path = self._write_minimal(minimal)
        result = ExploreResult(self.base, self.out_dir, self.seed, self.examples, minimal, path,
                               self.clock() - self._t0, stopped, self.reference_note, self.repeats)
        (self.out_dir / "explore.json").write_text(json.dumps(result.to_json(), indent=1))
        return result

    def _fails(self, schedule: Schedule) -> bool:
        """Hypothesis's condition: does this schedule make a held check fail?"""
        seen = self._memo.get(schedule.key())
        if seen is not None:
            self.repeats += 1
            return seen.failing
        phase = "shrink" if self._first_failure is not None else "generate"
        if phase == "generate" and self.max_minutes is not None and self.clock() - self._t0 > self.max_minutes * 60:
            raise _Stop("time budget spent")
        if phase == "shrink" and sum(1 for e in self.examples if e.phase == "shrink") >= self.shrink_runs:
            # budget spent: every new candidate counts as passing, so the shrinker settles on the
            # simplest failing schedule among those already run
            self._shrink_spent = True
            return False
        example = Example(len(self.examples) + 1, schedule, phase)
        self.examples.append(example)
        self._memo[schedule.key()] = example
        if self.observer:
            self.observer.example_started(example)
        t = self.clock()
        try:
            result = self.runner.run(schedule.apply(self._run_base), self.out_dir / "runs", reference=self.reference,
                                     observer=self.observer.run_event if self.observer else None)
        except ChaosError as exc:  # a bug of ours or a broken environment: stop, do not shrink on it
            raise _Stop("error", exc) from exc
        if result.interrupted:
            raise _Stop("interrupted", KeyboardInterrupt())
        example.result, example.seconds = result, self.clock() - t
        example.failed = [v.check for v in result.verdicts if v.status == "failed" and v.check in self.held]
        example.unknown = [v.check for v in result.verdicts if v.status == "unknown" and v.check in self.held]
        if example.failing and self._first_failure is None:
            self._first_failure = example  # from now on Hypothesis shrinks; find() returns the result
        if self.observer:
            self.observer.example_done(example)
        return example.failing

    # -- set-up ---------------------------------------------------------------------------------

    def _preflight(self) -> None:
        """One simple fault of every kind drawn, checked against this machine before any run."""
        samples = [find(KINDS[k](self.shape), lambda _: True, settings=settings(database=None)) for k in self.kinds]
        probe = Schedule(tuple(samples)).apply(self.base)
        self.runner.preflight(probe)

    def _observed_shape(self) -> TargetShape:
        """The shape, with the save points the (cached) fault-free reference run shows."""
        if not self.reference:
            return self.shape
        history, self.reference_note = self.runner.reference_history(self.base)
        return self.shape if history is None else self.shape.with_history(history)

    def database_key(self) -> bytes:
        """What the example database files this search under: the target, its arguments and
        topology, the strategy's arguments and the held checks."""
        blob = {"v": DATABASE_VERSION, "ref": reference_key(self.base), "kinds": self.kinds, "max_faults": self.max_faults,
                "checks": self.held, "backend": self.base.backend.kind}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).digest()

    def _write_minimal(self, example: Example) -> Path:
        return write_minimal(self.base, self.out_dir, self.seed, self.command, len(self.examples), example)
