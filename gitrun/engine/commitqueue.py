"""The background committer: landings committed as they arrive, a burst as one commit.

The driver hands each valid attempt's landing to a :class:`CommitQueue`,
whose thread commits them with the run's :class:`~gitrun.engine.committer.Committer`
(and gitrun's own files, the ledger among them, as they are then); landings
that arrive while a commit is being built share the next one, and a flush
commits what is queued on the calling thread, as a run ends or parks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gitrun.definition.outputs import blob_id
from gitrun.engine.committer import Committer, Landing, landing_message
from gitrun.store import git

# Landings arriving within this many seconds of the previous commit share the
# next one: prompt enough for a human, and a burst of tiny tasks does not cost
# a git commit (six git processes) each.
COALESCE = 0.25


@dataclass
class Committed:
    commit: str
    tasks: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # a sentence per landing left out


class CommitQueue:
    """A background thread that commits landings as they arrive.

    Landings that arrive while a commit is being built share the next one,
    so a burst of finished tasks becomes one commit.
    """

    def __init__(
        self,
        committer: Committer,
        own_files: Callable[[], dict[str, bytes]],
        on_commit: Callable[[Committed], None],
    ) -> None:
        self.committer = committer
        self.own_files = own_files
        self.on_commit = on_commit
        self._pending: list[Landing] = []
        self._cond = threading.Condition()
        self._closing = False
        self._holding = False  # a flush commits on its own thread
        self._busy = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="gitrun-committer", daemon=True)
        self._thread.start()

    def put(self, landing: Landing) -> None:
        with self._cond:
            self._pending.append(landing)
            # Only the first landing of a batch wakes the thread: while it
            # coalesces (or commits) it looks at the queue again by itself,
            # and a wake-up per landing costs the driver's thread the GIL.
            if len(self._pending) == 1:
                self._cond.notify_all()

    def flush(self) -> None:
        """Commit everything queued so far with the current ledger: one commit,
        made on the calling thread once the thread's commit in progress (if
        any) is published, so a run's last landings and its ledger's last
        records do not cost two commits at shutdown."""
        with self._cond:
            self._holding = True  # the thread takes no batch from now on
            self._cond.notify_all()
            while self._busy and self.error is None:
                self._cond.wait(0.1)
            # After a failed commit, the landings stay on disk for resume.
            batch = self._pending if self.error is None else []
            self._pending = []
        try:
            self._commit(batch)
        finally:
            with self._cond:
                self._holding = False
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        last = 0.0
        while True:
            with self._cond:
                while (not self._pending or self._holding) and not self._closing:
                    self._cond.wait()
                if self._closing and (not self._pending or self._holding):
                    return
                while (
                    not self._closing and not self._holding and time.monotonic() < last + COALESCE
                ):
                    self._cond.wait(last + COALESCE - time.monotonic())
                if not self._pending or self._holding:
                    continue  # a flush took the batch
                last = time.monotonic()
                batch, self._pending = self._pending, []
                self._busy = True
            try:
                self._commit(batch)
            except BaseException as exc:  # reported by the driver, which stops the run
                self.error = exc
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _commit(self, batch: list[Landing]) -> None:
        own = self.own_files()
        if not batch and not self._changed(own):
            return
        message = landing_message(self.committer.run_id, batch)
        commit = self.committer.commit(batch, own, message)
        left_out = self.committer.take_left_out()
        tasks = [landing.task for landing in batch if landing.task not in left_out]
        self.on_commit(Committed(commit, tasks, list(left_out.values())))

    def _changed(self, own: dict[str, bytes]) -> bool:
        """Whether gitrun's own files differ from the branch's tip; the tree
        is read only when the tip is not this committer's own last commit."""
        tip = git.rev_parse(self.committer.repo, self.committer.ref)
        if tip is None:
            return True
        known = self.committer.own_blobs_at(tip)
        if known is None or not known.keys() >= own.keys():
            known = {
                path: sha
                for path, (_, sha) in git.ls_tree(self.committer.repo, tip, sorted(own)).items()
            }
        fmt = self.committer.object_format
        return any(known.get(path) != blob_id(data, fmt) for path, data in own.items())
