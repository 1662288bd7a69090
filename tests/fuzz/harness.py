"""Run one generated input through ``chaos.cli.main`` in a forked child, with a time and memory limit.

The parent imports ``chaos.cli`` and what its commands import once (:func:`preload`), so an input
costs a fork, not a Python start-up. Each :class:`Input` is (argv, files to create, what it must
exit with). :func:`run_input` makes a fresh temporary directory (the child's cwd; argv's ``{tmp}``
is replaced by its path), creates the files, forks; the child starts a new session, limits its
address space (``RLIMIT_AS``, :data:`MEMORY_LIMIT`) and file size (``RLIMIT_FSIZE``), points
stdout/stderr at files and calls ``main(argv)``. The parent waits at most ``timeout_s`` (20 s:
longer is a hang), then SIGKILLs the child's process group whatever happened, and removes the
directory. Nothing outlives an input.

**No input starts a real run.** In the child, ``_Run.execute`` (a run's processes) and
``ReferenceCache.get_or_run`` (a reference run) are replaced by a stop that exits with
:data:`WOULD_RUN`: an input that got that far was accepted (for a bad-by-construction input, a
finding: nonsense accepted). ``CHAOS_LOCK_DIR``, ``CHAOS_CACHE_DIR``, ``CHAOS_RUNS_DIR`` and
``TMPDIR`` point into the input's directory, so nothing reaches the machine-wide registry.

:func:`judge` is the oracle: an :class:`Outcome` against its :class:`Input` gives a finding class
(a short string) or None.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 20.0
# A plain `validate` peaks at ~60 MiB resident and ~0.4 GiB of address space without torch; torch on
# CPU maps ~2 GiB more. 4 GiB leaves room for either and still stops /dev/zero or an alias bomb.
MEMORY_LIMIT = 4 << 30
FILE_LIMIT = 256 << 20  # stdout/stderr and whatever chaos writes: a 139 MB error message is a finding
BIG_OUTPUT = 1 << 20  # more than this on stdout+stderr is a finding (an expansion printed whole)
WOULD_RUN, UNCAUGHT = 97, 98  # child exit codes of the harness itself
TRACEBACK = "Traceback (most recent call last)"
TAIL = 1500
Entry = Callable[[list[str]], int]

# What a file spec's ``kind`` may be: bytes written, a FIFO, a symlink to ``data`` (text), a directory,
# or a copy of the tree at ``data`` (a path).
KINDS = ("bytes", "fifo", "symlink", "dir", "tree")


@dataclass(frozen=True)
class FileSpec:
    """One thing to create, at ``path`` relative to the input's directory."""

    path: str
    kind: str = "bytes"
    data: bytes | str = b""


@dataclass
class Input:
    """One generated input. ``expect``: the exit codes its command documents for it. ``names``: for an
    input bad by construction, words of which stderr/stdout must contain one (the flag or field), and
    exit 2 is then the only right answer. ``after``: an input that must exit 2 first (``validate`` of
    the same file before ``run`` of it): this one runs only if that one did."""

    command: str
    argv: list[str]
    files: list[FileSpec] = field(default_factory=list)
    expect: frozenset[int] = frozenset({0, 1, 2})
    names: tuple[str, ...] = ()
    note: str = ""
    after: Input | None = None

    def shown(self) -> str:
        files = ", ".join(f"{f.path}({f.kind}{'' if f.kind != 'bytes' else f' {len(f.data)}B'})" for f in self.files)
        text = f"chaos {' '.join(self.argv)!r:.300}  [{self.note}] files: {files:.300}"
        return text.encode("utf-8", "backslashreplace").decode("utf-8")  # argv and names may hold surrogates


@dataclass
class Outcome:
    """What one input did. ``code``: the exit status, ``"uncaught"`` (an exception escaped ``main``),
    ``"would_run"`` (it got as far as starting a run), ``"signal N"``, or ``"hung"``."""

    argv: list[str]
    code: int | str
    seconds: float
    stdout_tail: str
    stderr_tail: str
    hung: bool
    traceback_seen: bool
    killed: str = ""  # "memory" / "signal SIGSEGV" / "" (hangs are `hung`)
    output_bytes: int = 0
    maxrss_mib: float = 0.0
    last_line: str = ""  # the traceback's last line, if any


def preload() -> None:
    """Import the CLI and the modules its commands import (lazily, inside each command) in this process,
    so that forked children start with them. Idempotent; ~1-2 s the first time."""
    import chaos.cli  # noqa: F401

    for name in ("chaos.cli_run", "chaos.load.loader", "chaos.load.derive", "chaos.load.schema", "chaos.load.notes",
                 "chaos.run.rejudge", "chaos.run.runner", "chaos.run.reference", "chaos.verdicts.table",
                 "chaos.verdicts.junit", "chaos.cleanup", "chaos.paths", "chaos.backends", "chaos.checks", "chaos.faults",
                 "chaos.plugins", "chaos.explore", "chaos.explore.display", "chaos.progress", "chaos.doctor",
                 "chaos.timeline"):
        try:
            __import__(name)
        except ImportError:  # a module being moved by someone else: the command imports it itself then
            pass
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401  (report draws timeline.png)
    except ImportError:
        pass


def _make(root: Path, spec: FileSpec) -> None:
    path = root / spec.path
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if spec.kind == "bytes":
        path.write_bytes(spec.data if isinstance(spec.data, bytes) else spec.data.encode())
    elif spec.kind == "fifo":
        os.mkfifo(path)
    elif spec.kind == "symlink":
        os.symlink(str(spec.data), path)
    elif spec.kind == "dir":
        path.mkdir()
    elif spec.kind == "tree":
        shutil.copytree(str(spec.data), path, symlinks=True)
    else:
        raise ValueError(f"FileSpec.kind={spec.kind!r}: one of {KINDS}")


def _stop_runs() -> None:
    """In the child: make starting a run (or a reference run) exit WOULD_RUN instead."""

    def stop(*_a: object, **_k: object) -> None:
        sys.stdout.flush()
        sys.stderr.write("\n[fuzz harness] stopped: this input would have started a run\n")
        sys.stderr.flush()
        os._exit(WOULD_RUN)

    try:
        from chaos.run import runner

        runner._Run.execute = stop  # type: ignore[method-assign,assignment]
        runner.reference_run = stop  # type: ignore[assignment]
    except (ImportError, AttributeError):
        os._exit(UNCAUGHT - 1)  # the guard could not be set: run nothing
    try:
        from chaos.run import reference

        reference.ReferenceCache.get_or_run = stop  # type: ignore[method-assign,assignment]
    except (ImportError, AttributeError):
        pass


def _child(argv: list[str], root: Path, out: Path, err: Path, memory: int, entry: Entry | None) -> None:
    try:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(root)
        env = {"CHAOS_LOCK_DIR": str(root / ".lock"), "CHAOS_CACHE_DIR": str(root / ".cache"),
               "CHAOS_RUNS_DIR": str(root / ".chaos-runs"), "TMPDIR": str(root / ".tmp"), "COLUMNS": "120",
               "TERM": "dumb"}
        os.makedirs(env["TMPDIR"], exist_ok=True)
        os.environ.update(env)
        tempfile.tempdir = None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        # as Python sets them up in a UTF-8 locale: stdout strict, stderr backslashreplace
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, errors="backslashreplace")  # noqa: SIM115
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _stop_runs()
        from chaos.cli import main as cli_main

        main: Callable[[list[str]], int] = entry or cli_main
    except BaseException:  # the harness's own set-up failed
        os._exit(UNCAUGHT - 2)
    code: int
    try:
        result = main(list(argv))
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:  # argparse's exit, or a command's sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = UNCAUGHT
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code & 0xFF)


def _scan(path: Path) -> tuple[bool, str, int, str]:
    """(traceback text seen, tail, size in bytes, a traceback's last line) of an output file."""
    try:
        size = path.stat().st_size
    except OSError:
        return False, "", 0, ""
    seen, last = False, ""
    with open(path, "rb") as f:
        carry = b""
        while chunk := f.read(1 << 20):
            buf = carry + chunk
            if TRACEBACK.encode() in buf:
                seen = True
            carry = buf[-64:]
        f.seek(max(0, size - 8192))
        tail = f.read().decode("utf-8", "replace")
    if seen:
        lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.startswith("[fuzz harness]")]
        exc_lines = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit|Warning)\b", ln)]
        last = (exc_lines or lines or [""])[-1][:300]
    return seen, tail[-TAIL:], size, last


def run_input(inp: Input, timeout_s: float = TIMEOUT_S, memory: int = MEMORY_LIMIT, entry: Entry | None = None) -> Outcome:
    """Run ``inp`` once in a forked child (see the module's docstring); never raises for what the
    child does. Takes at most ``timeout_s`` plus a few tenths of a second. ``entry``: what the child
    calls with argv instead of ``chaos.cli.main`` (the harness's own tests)."""
    root = Path(tempfile.mkdtemp(prefix="chaos-fuzz-"))
    try:
        (root / "targets").symlink_to(REPO / "targets")  # so ../targets/x.py of scenarios/<mutant>.yaml resolves
        for spec in inp.files:
            try:
                _make(root, spec)
            except OSError:  # a later spec needs what an earlier one replaced (events/x under a FIFO events): skip
                pass
        argv = [a.replace("{tmp}", str(root)) for a in inp.argv]
        out, err = root / ".fuzz-stdout", root / ".fuzz-stderr"
        sys.stdout.flush()
        sys.stderr.flush()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(argv, root, out, err, memory, entry)
            os._exit(UNCAUGHT - 3)  # not reached
        status, usage, hung = _wait(pid, timeout_s)
        seconds = time.monotonic() - t0
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever it started, it does not outlive the input
        except (ProcessLookupError, PermissionError):
            pass
        tb_out, out_tail, out_size, last_out = _scan(out)
        tb_err, err_tail, err_size, last_err = _scan(err)
        code: int | str
        killed = ""
        if hung:
            code = "hung"
        elif os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            code = {WOULD_RUN: "would_run", UNCAUGHT: "uncaught"}.get(code, code)
        else:
            sig = os.WTERMSIG(status)
            code = f"signal {signal.Signals(sig).name}"
            killed = code
        crash = _crash_last_line(root, err_tail + out_tail)
        if "MemoryError" in err_tail or "MemoryError" in out_tail or "Cannot allocate memory" in err_tail:
            killed = "memory"
        return Outcome(argv=argv, code=code, seconds=seconds, stdout_tail=out_tail, stderr_tail=err_tail, hung=hung,
                       traceback_seen=tb_out or tb_err, killed=killed, output_bytes=out_size + err_size,
                       maxrss_mib=(usage.ru_maxrss / 1024) if usage else 0.0, last_line=last_err or last_out or crash)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _crash_last_line(root: Path, text: str) -> str:
    """The last line of the traceback file an exit-3 message names (``... the traceback is in PATH``), if
    it is inside the input's directory (CHAOS_CACHE_DIR is); else ""."""
    m = re.search(r"traceback is in (\S+?)[;,]?\s", text + " ")
    if not m:
        return ""
    path = Path(m.group(1))
    try:
        if root.resolve() not in path.resolve().parents:
            return ""
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    exc_lines = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit|Warning)\b", ln)]
    return f"[crash file] {(exc_lines or lines)[-1][:300]}" if lines else ""


def _wait(pid: int, timeout_s: float) -> tuple[int, resource.struct_rusage | None, bool]:
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        got, status, usage = os.wait4(pid, os.WNOHANG)
        if got == pid:
            return status, usage, False
        if time.monotonic() >= deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return status, usage, True
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)


def judge(inp: Input, out: Outcome) -> str | None:
    """The oracle: None when ``out`` is right for ``inp``, else the finding's class, e.g.
    ``"traceback: KeyError"``, ``"hang"``, ``"exit 3 (chaos crashed)"``, ``"wrong exit 1"``,
    ``"accepted nonsense"``, ``"flag not named"``, ``"memory"``, ``"huge output"``."""
    if out.hung:
        return "hang"
    if out.killed == "memory":
        return "memory"
    if out.traceback_seen or out.code == "uncaught":
        return f"traceback: {_exc_name(out.last_line)}"
    if isinstance(out.code, str) and out.code.startswith("signal"):
        return f"killed by {out.code}"
    if out.code == 3:
        return "exit 3 (chaos crashed)"
    if out.output_bytes > BIG_OUTPUT:
        return "huge output"
    if inp.names:  # bad by construction: exit 2, naming the flag or field
        if out.code == "would_run":
            return "accepted nonsense"
        if out.code != 2:
            return f"wrong exit {out.code}"
        text = out.stdout_tail + out.stderr_tail
        if not any(n in text for n in inp.names):
            return "flag not named"
        return None
    if out.code == "would_run":
        return None if "would_run" in inp.expect else "accepted nonsense"
    if out.code not in inp.expect:
        return f"wrong exit {out.code}"
    return None


def _exc_name(line: str) -> str:
    m = re.match(r"^([\w.]+)", line.strip())
    return m.group(1).rsplit(".", 1)[-1] if m else (line.strip()[:60] or "?")


@dataclass
class Tally:
    """Counts and findings of many inputs: per command, per exit code, per finding class (with the first
    example of each)."""

    inputs: int = 0
    seconds: float = 0.0
    per_command: dict[str, int] = field(default_factory=dict)
    per_command_s: dict[str, float] = field(default_factory=dict)
    per_code: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: dict[str, list[tuple[Input, Outcome]]] = field(default_factory=dict)
    skipped: int = 0  # run inputs not run: validate accepted the file
    max_rss_mib: float = 0.0

    def add(self, inp: Input, out: Outcome) -> str | None:
        self.inputs += 1
        self.seconds += out.seconds
        self.per_command[inp.command] = self.per_command.get(inp.command, 0) + 1
        self.per_command_s[inp.command] = self.per_command_s.get(inp.command, 0.0) + out.seconds
        codes = self.per_code.setdefault(inp.command, {})
        codes[str(out.code)] = codes.get(str(out.code), 0) + 1
        self.max_rss_mib = max(self.max_rss_mib, out.maxrss_mib)
        finding = judge(inp, out)
        if finding:
            key = f"{inp.command}: {finding}"
            self.findings.setdefault(key, []).append((inp, out))
        return finding

    def run(self, inp: Input, timeout_s: float = TIMEOUT_S) -> Outcome | None:
        """Run ``inp`` (first its ``after`` input: only if that exits 2 does ``inp`` run) and count both."""
        if inp.after is not None:
            first = run_input(inp.after, timeout_s)
            self.add(inp.after, first)
            if first.code != 2:
                self.skipped += 1
                return None
        out = run_input(inp, timeout_s)
        self.add(inp, out)
        return out

    def summary(self, limit: int = 40) -> str:
        lines = [f"{self.inputs} inputs, {len(self.findings)} finding classes"]
        for key, hits in sorted(self.findings.items(), key=lambda kv: -len(kv[1]))[:limit]:
            inp, out = hits[0]
            lines.append(f"- {key} ×{len(hits)}: {inp.shown()}")
            lines.append(f"    exit {out.code} in {out.seconds:.1f}s; last line: {out.last_line or _last(out)!r:.300}")
            lines.append(f"    stderr tail: {out.stderr_tail[-300:]!r}")
        return "\n".join(lines)


def _last(out: Outcome) -> str:
    text = (out.stderr_tail or out.stdout_tail).strip().splitlines()
    return text[-1] if text else ""


def expect(*codes: int | str) -> frozenset[int]:
    """An ``expect`` set (``"would_run"`` allowed for inputs that may be valid; they are stopped)."""
    return frozenset(codes)  # type: ignore[arg-type]


def copy_tree_spec(src: Path, dest: str, skip: Sequence[str] = ()) -> list[FileSpec]:
    """FileSpecs that copy every regular file under ``src`` to ``dest`` (skipping names in ``skip``)."""
    specs = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if rel.parts[0] in skip or not p.is_file():
            continue
        specs.append(FileSpec(f"{dest}/{rel}", "bytes", p.read_bytes()))
    return specs

