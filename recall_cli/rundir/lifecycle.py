"""A run directory's life: a new one (--overwrite moves the old aside), its one writer's lock, what
--resume may continue, and what train.save=final keeps at the end."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import RunDirError
from .layout import (ANCHOR_FILE, BEST_DIR, CHECKPOINTS_DIR, LAST_DIR, LP_DIR, METRICS_FILE, OPTIMIZER_FILE, START_FILE,
                     SUMMARY_FILE, _old, is_run_dir)
from .metrics import read_metrics
from .writing import check_writable


def keep_final(run_dir: Path) -> int:
    """train.save=final, at the end of a finished run: remove what only --resume and theta*-based
    merges read (last/'s optimizer and RNG state, anchor.safetensors and start.safetensors, checkpoints/); returns the bytes
    freed. last/trainer_state.json stays: it is small, and says where the run ended."""
    freed = 0
    last = run_dir / LAST_DIR
    doomed = [run_dir / ANCHOR_FILE, run_dir / START_FILE, *sorted(last.glob("rng_state*.pt")), last / OPTIMIZER_FILE]
    for path in doomed:
        if path.is_file():
            freed += path.stat().st_size
            path.unlink()
    steps = run_dir / CHECKPOINTS_DIR
    if steps.is_dir():
        freed += sum(p.stat().st_size for p in steps.rglob("*") if p.is_file())
        shutil.rmtree(steps)
    return freed


def saved_before(run_dir: Path) -> str | None:
    """What shows that ``run_dir`` completed a save (a checkpoint, a summary, an evaluation): a run
    that --resume must not start over. None for a run stopped before its first save."""
    for name in (BEST_DIR, LAST_DIR, LP_DIR):
        if (run_dir / name).is_dir() or _old(run_dir / name).is_dir():
            return f"{name}/"
    if (run_dir / SUMMARY_FILE).is_file():
        return SUMMARY_FILE
    if (run_dir / CHECKPOINTS_DIR).is_dir():
        return f"{CHECKPOINTS_DIR}/"
    if any(r.get("split") == "eval" for r in read_metrics(run_dir)):
        return f"the evaluations in {METRICS_FILE}"
    return None


def remove_stale_staging(run_dir: Path) -> None:
    """Staging folders of saves that a kill interrupted (last/, best/, and the checkpoints/ copies)."""
    for path in [*run_dir.glob(".*.tmp-*"), *run_dir.glob(f"{CHECKPOINTS_DIR}/.*.tmp-*")]:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale_output_staging(out: Path) -> None:
    """What a writer of ``out`` killed while staging left beside it (merge's and evaluate --record's
    ``.OUT.tmp-XXXX`` folders, predict's ``.OUT.tmp`` file): called by the next writer of ``out``
    once it holds out's lock, so none of them can be a live writer's."""
    import glob

    if not out.parent.is_dir():
        return
    for path in [*out.parent.glob(f".{glob.escape(out.name)}.tmp-*"), out.parent / f".{out.name}.tmp"]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() or path.is_symlink():
            path.unlink(missing_ok=True)


def check_new_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Refuse to clobber an existing directory unless asked, and never replace one that is not a run.
    Touches nothing: every rank of a distributed run checks this before the process group exists, so
    all of them fail alike (:class:`NewRunDir` applies it). A folder that cannot be written there
    (a file, a dangling link, a read-only or foreign parent) is an EnvironmentProblem."""
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            raise RunDirError(
                f"output_dir {run_dir} already exists: continue it with --resume {run_dir}, "
                "replace it with --overwrite, or choose another output_dir"
            )
        if not is_run_dir(run_dir):
            raise RunDirError(
                f"output_dir {run_dir} exists and is not a recall run directory: --overwrite only replaces runs; "
                "choose another output_dir"
            )
    check_writable(run_dir, "output_dir")


LOCK_FILE = ".recall.lock"  # in a run directory while a process writes it (RunLock)


class RunLock:
    """One writer per run directory: an exclusive flock on RUN/.recall.lock for the writer's life, the
    file holding its pid for the message a second writer gets. The kernel drops the lock when the
    process dies (kill -9 too), so a lock file left behind is stale: the next writer takes it over."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def take(cls, run_dir: Path, warn: Callable[[str], None] | None = None, *, path: Path | None = None,
             writer: str = "another recall finetune", other: str = "output_dir") -> RunLock:
        """Lock ``run_dir`` (its own lock file, or ``path``: an output that does not exist yet is locked
        by a hidden sibling file, ``output_lock``)."""
        import fcntl

        path = path or run_dir / LOCK_FILE
        for _ in range(5):
            fd = open_lock_file(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise RunDirError(f"{run_dir} is being written by process {holder} ({writer}): wait for it to end or "
                                  f"stop it, or choose another {other}; two writers would mix their files") from None
            try:  # the holder may have released (and removed) the file between our open and our lock
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        else:
            raise RunDirError(f"{run_dir}: could not take its lock file {path}: run the command again")
        previous = os.read(fd, 64).decode(errors="replace").strip()
        if previous and previous != str(os.getpid()) and warn is not None:
            warn(f"{run_dir}: took over the lock of process {previous}, which is no longer running")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.path.is_file() and os.pread(self.fd, 64, 0).decode(errors="replace").strip() == str(os.getpid()):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


def open_lock_file(path: Path) -> int:
    """The lock file, opened for reading and writing without following a link (a link planted at its name
    would have recall truncate and write the link's target), and refused unless it is a regular file of
    this user's: one line naming it and the fix."""
    import errno
    import stat

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunDirError(f"the lock file {path} is a symbolic link: recall never writes through one; remove it "
                              "(rm) and run the command again") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"owned by another user (uid {info.st_uid})"
        raise RunDirError(f"the lock file {path} is {what}: remove it, or write somewhere you own")
    return fd


def lock_folder() -> Path:
    """This user's folder of output locks in the temporary folder, mode 0700: made so, and checked (not
    trusted) when it exists, since another user could have made it first, writable by anyone."""
    import stat
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"recall-locks-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RunDirError(f"the lock folder {folder} is not this user's alone (a link, another owner, or open to "
                          f"others: mode {stat.S_IMODE(info.st_mode):o}): remove it, or set TMPDIR to a folder of yours")
    return folder


def output_lock_path(out: Path) -> Path:
    """The lock file of OUT's writer (output_lock), for a process that waits for that writer to let go."""
    import hashlib

    return lock_folder() / f"{hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:24]}.lock"


@contextmanager
def output_lock(out: Path, writer: str, other: str) -> Iterator[None]:
    """One writer of a staged output (merge --out, evaluate --record) for the command's life, so a second
    command writing the same OUT is refused in one line naming the first's pid instead of racing it to
    the rename (or replacing it under --overwrite). The lock file is named after OUT's absolute path in
    this user's lock folder (lock_folder): OUT and its parents may not exist yet, and every writer of
    this user must find the same file."""
    out = Path(out)
    lock = RunLock.take(out, path=output_lock_path(out), writer=writer, other=other)
    try:
        remove_stale_output_staging(out)
        yield
    finally:
        lock.release()


class NewRunDir:
    """A new run directory that exists for good only once the run has taken its first optimizer step.

    ``begin`` moves an old run (--overwrite) aside to a hidden sibling instead of deleting it;
    ``commit`` (after the first step) deletes that old run; ``rollback`` (a failure before it) deletes
    what the new run wrote and moves the old run back, so the directory is as it was before the
    command (a new run leaves none). A kill -9 in between leaves the old run in ``.NAME.replaced-PID``.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.aside: Path | None = None
        self.existed = False
        self.open = False
        self.locks: list[RunLock] = []

    def claim(self, warn: Callable[[str], None] | None = None) -> None:
        """Lock a run directory that holds something, before anything reads or moves it: a second writer
        (finetune --overwrite or --resume into a run still training) is refused in one line."""
        if self.run_dir.is_dir() and any(self.run_dir.iterdir()):
            self.locks.append(RunLock.take(self.run_dir, warn))

    def begin(self, overwrite: bool) -> None:
        check_new_run_dir(self.run_dir, overwrite)
        self.existed = self.run_dir.exists()
        if self.existed and any(p.name != LOCK_FILE for p in self.run_dir.iterdir()):
            self.aside = self.run_dir.with_name(f".{self.run_dir.name}.replaced-{os.getpid()}")
            os.replace(self.run_dir, self.aside)  # with its lock file, still ours
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not (self.run_dir / LOCK_FILE).is_file():
            self.locks.append(RunLock.take(self.run_dir))
        self.open = True

    def release(self) -> None:
        """The end of the writer: its lock files go (the run directory is as the run left it)."""
        for lock in reversed(self.locks):
            lock.release()
        self.locks = []

    def commit(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.aside is not None:
            shutil.rmtree(self.aside, ignore_errors=True)

    def rollback(self) -> None:
        if not self.open:
            return
        self.open = False
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.aside is not None:
            os.replace(self.aside, self.run_dir)
        elif self.existed:
            self.run_dir.mkdir(parents=True, exist_ok=True)  # it was an empty folder
