"""The sweep's progress display: an overall bar with an ETA plus one line per running node
(tqdm, in the parent process), for the local and the Ray executor of `anchorviz.pipeline.runner`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anchorviz.pipeline.runner import Node

__all__ = ["KINDS", "Progress", "duration"]

KINDS = ("teacher", "reference", "ceiling", "student")


class Progress:
    """An overall bar plus one line per running node (tqdm, in the parent process).

    The bar counts every node (teachers, reference captures, ceilings, students), shows how
    many of each kind are done, and an overall ETA: the nodes not finished yet, each at the
    mean time of the computed nodes of its kind (of any kind until one of its own finished;
    a node read from the store costs nothing), less what the running ones have already spent,
    shared over the worker slots."""

    def __init__(self, total: int | list[Node], slots: int, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        nodes = total if isinstance(total, list) else []
        self.enabled = enabled
        self.slots = max(1, slots)
        self.todo: dict[str, str] = {n.id: n.kind for n in nodes}  # not finished yet
        self.totals = {k: sum(n.kind == k for n in nodes) for k in KINDS}
        self.done = dict.fromkeys(KINDS, 0)
        self.seconds: dict[str, list[float]] = {k: [] for k in KINDS}  # computed nodes
        self.bar = tqdm(total=len(nodes) if nodes else int(total), desc="sweep", unit="node",
                        disable=not enabled,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                   "[{elapsed}{postfix}]")
        self.lines = [tqdm(total=0, bar_format="{desc}", position=i + 1, leave=False,
                           disable=not enabled or slots < 2) for i in range(slots)]
        self.slot: dict[str, int] = {}
        self.start: dict[str, float] = {}
        self.where: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        self._postfix()

    def started(self, node: Node, where: str | None = None) -> None:
        """``node`` began (again, when retried) on ``where`` (default: "worker <slot>")."""
        if node.id not in self.slot:
            used = set(self.slot.values())
            free = [i for i in range(len(self.lines)) if i not in used]
            self.slot[node.id] = free[0] if free else 0
        self.start[node.id] = time.perf_counter()
        self.where[node.id] = where or f"worker {self.slot[node.id] + 1}"
        self.kind[node.id] = node.kind
        self.refresh()

    def finished(self, node: Node, result: dict | None = None) -> None:
        """``node`` ended; ``result`` (its summary: ``computed``, ``seconds``) feeds the ETA."""
        began = self.start.get(node.id)
        i = self.slot.pop(node.id, None)
        self.start.pop(node.id, None)
        self.where.pop(node.id, None)
        if i is not None and i not in self.slot.values():
            self.lines[i].set_description_str("")
        if result is not None and result.get("computed", True) and node.kind in self.seconds:
            secs = result.get("seconds")
            if secs is None and began is not None:
                secs = time.perf_counter() - began
            if secs is not None:
                self.seconds[node.kind].append(float(secs))
        if self.todo.pop(node.id, None) is not None and node.kind in self.done:
            self.done[node.kind] += 1
        self._postfix()
        self.bar.update(1)

    # a ceiling and a student train the same model on the same pairs: one's time stands for the other's
    _ALIKE = {"student": "ceiling", "ceiling": "student"}

    def eta(self) -> float | None:
        """Seconds until every node is done (None until a computed node gave a time)."""
        return self._eta()[0]

    def _eta(self) -> tuple[float | None, bool]:
        """``(seconds, lower_bound)``: ``lower_bound`` when some kind still to run has no time of
        its own or of a like kind and is estimated from the others (teachers and reference
        captures, usually the cheaper nodes), so the true ETA is likely longer."""
        if not self.todo:
            return 0.0, False
        measured = [s for v in self.seconds.values() for s in v]
        if not measured:
            return None, False
        overall = sum(measured) / len(measured)
        now = time.perf_counter()
        work, bound = 0.0, False
        for nid, kind in self.todo.items():
            own = self.seconds.get(kind) or self.seconds.get(self._ALIKE.get(kind, ""), [])
            if not own:
                bound = True
            mean = sum(own) / len(own) if own else overall
            spent = now - self.start[nid] if nid in self.start else 0.0
            work += max(mean - spent, 0.0)
        return work / min(self.slots, len(self.todo)), bound

    def _postfix(self) -> None:
        if not any(self.totals.values()):
            return
        parts = [f"{k} {self.done[k]}/{n}" for k, n in self.totals.items() if n]
        eta, bound = self._eta()
        if eta is not None:
            parts.append(f"ETA {'>' if bound else ''}{duration(eta)}")
        self.bar.set_postfix_str(", ".join(parts), refresh=False)

    def refresh(self) -> None:
        for nid, i in self.slot.items():
            secs = time.perf_counter() - self.start[nid]
            self.lines[i].set_description_str(
                f"  {self.where[nid]}: {self.kind[nid]} {nid}  {secs:5.0f} s")
        self._postfix()
        self.bar.refresh()

    def close(self) -> None:
        for line in self.lines:
            line.close()
        self.bar.close()


def duration(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
