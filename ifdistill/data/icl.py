"""Inputs for ICL logit distillation: k demonstrations for the teacher, none for the student.

The teacher sees ``k`` demonstrations (earlier user/assistant turns), then the prompt and the
completion; the student sees the prompt and the completion. Distillation compares their next-token
distributions on the completion tokens, so the two views must contain the *same completion token
ids*, and training needs to know where those tokens are in each view: :func:`build_icl_pair`
returns both renderings and the aligned positions, and asserts the ids match.

Demo selection (:func:`select_demos`, also used by the evaluator for k-shot prompts, so training and
evaluation pick demonstrations by one rule):

1. The pool is put in a canonical order (sorted by ``uid``), so the choice does not depend on the
   order the pool was loaded in.
2. A seeded permutation of that order is fixed per ``seed``.
3. For the example ``exclude_key``, start at an offset derived from ``sha256(seed, exclude_key)``
   and walk the permutation, skipping the example itself (same uid or key) and any demo whose prompt
   text equals the example's prompt (after ``strip()``), until ``k`` demos are found.

So the choice is deterministic, differs between examples, depends on nothing but the example, the pool
and the seed (training's pool is every new training example, taken before ``data.total``'s subset, so a
sweep over replay ratios and order seeds gives an example the same demonstrations: what lets one teacher
cache serve the sweep, :mod:`ifdistill.methods.distill.teacher_pass_runner`), never contains the example (by id
*or* by identical prompt), and costs O(k) per example after an O(n log n) set-up (:class:`DemoSelector`
keeps that set-up for a whole dataset).

Rendering: demos go after any system message and before the example's own turns, in the order
selected. The teacher is rendered with ``train_on="last_assistant"`` (demo answers are context, not
targets), and so is the student, so that both supervise exactly the final answer.

The teacher's view (:func:`teacher_view`) is built in one place, whichever demonstration scheme
chooses the demonstrations (``per_example``: :mod:`ifdistill.data.build`, a set per example;
``shared``: :mod:`ifdistill.methods.distill.shared_demos`, a set per micro-batch). The rules that make a view --
the replay rule (replay examples read no demonstrations unless ``icl_on_replay``), the thinking flag,
dropping the first demonstration while the teacher conversation exceeds ``teacher_max_length``, and
the alignment of the teacher's completion with the (possibly left-cut) training item -- live there
and nowhere else, so the two schemes cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ifdistill.data.mixing import permutation
from ifdistill.data.records import DataError, Example
from ifdistill.data.render import Rendered, RenderError, render


DEMO_SCHEMES = ("shared", "per_example")


@dataclasses.dataclass(frozen=True)
class IclSettings:
    """Everything that decides an ICL teacher's view, resolved once from the data, method and model sections.

    ``k``, ``demos`` and ``extra_demos`` come from the method (:meth:`ifdistill.train.method.MethodHooks.teacher_views`;
    ``conf/method/distill.yaml`` states the default scheme; ``extra_demos``: a function of the example
    giving the demonstrations the method adds after the ``k`` drawn ones -- per-example views only);
    ``seed``, ``on_replay`` and ``teacher_max_length`` from ``data`` (``icl_seed`` falling back to
    ``seed``); ``enable_thinking`` is the one the student is rendered with (``model.enable_thinking``
    when set, else ``data.enable_thinking``).
    """

    k: int
    demos: str
    seed: int
    on_replay: bool = False
    teacher_max_length: int | None = None
    enable_thinking: bool | None = None
    extra_demos: Callable[[Example], Sequence[Example]] | None = None

    def __post_init__(self):
        if self.k < 0:
            raise ValueError(f"method.k must be >= 0, got {self.k}")
        if self.demos not in DEMO_SCHEMES:
            raise ValueError(f"method.demos must be one of {DEMO_SCHEMES}, got {self.demos!r}")
        if self.extra_demos is not None and self.demos != "per_example":
            raise ValueError(f"method.demos={self.demos}: the method adds demonstrations of each example's own "
                             "(extra_demos), which needs method.demos=per_example")
        if self.teacher_max_length is not None and self.teacher_max_length < 1:
            raise ValueError(f"data.teacher_max_length must be >= 1 or null, got {self.teacher_max_length}")


def _ids(ex: Example) -> set[str]:
    out = {ex.uid}
    if ex.key is not None:
        out.add(ex.key)
    return out


class DemoSelector:
    """A demo pool prepared once for many :meth:`select` calls."""

    def __init__(self, pool: Sequence[Example], *, seed: int):
        usable = [ex for ex in pool if ex.completion.strip() and ex.prompt.strip()]
        self.pool = sorted(usable, key=lambda ex: ex.uid)
        self.seed = seed
        self.order = permutation(len(self.pool), seed, "icl-demos")
        self._prompt_of = {i: ex.prompt.strip() for ex in self.pool for i in _ids(ex)}

    def select(self, k: int, *, exclude_key: str | None, exclude_prompt: str | None = None) -> list[Example]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0:
            return []
        n = len(self.pool)
        exclude_prompt = exclude_prompt.strip() if exclude_prompt is not None else None
        if exclude_prompt is None and exclude_key is not None:  # the prompt of the excluded example
            exclude_prompt = self._prompt_of.get(exclude_key)
        digest = hashlib.sha256(f"{self.seed}\x00{exclude_key}".encode()).digest()
        start = int.from_bytes(digest[:8], "little") % n if n else 0
        out: list[Example] = []
        for step in range(n):
            ex = self.pool[self.order[(start + step) % n]]
            if exclude_key is not None and exclude_key in _ids(ex):
                continue
            if exclude_prompt is not None and ex.prompt.strip() == exclude_prompt:
                continue
            out.append(ex)
            if len(out) == k:
                return out
        raise ValueError(f"demo pool has only {len(out)} usable demonstrations for k={k} "
                         f"(pool of {n} after excluding {exclude_key!r})")


def select_demos(pool: Sequence[Example], k: int, *, seed: int, exclude_key: str | None,
                 exclude_prompt: str | None = None) -> list[Example]:
    """``k`` demonstrations from ``pool`` for the example ``exclude_key`` (its uid or IFEval key).

    ``exclude_prompt`` (optional) also excludes demos with that exact prompt text; when omitted and
    the excluded example is in the pool, its own prompt is used.
    """
    return DemoSelector(pool, seed=seed).select(k, exclude_key=exclude_key, exclude_prompt=exclude_prompt)


def with_demos(messages: Sequence[dict[str, str]], demos: Sequence[Example]) -> list[dict[str, str]]:
    """The conversation with demos inserted as earlier user/assistant turns (after a system turn)."""
    msgs = [dict(m) for m in messages]
    head = [msgs.pop(0)] if msgs and msgs[0]["role"] == "system" else []
    shots: list[dict[str, str]] = []
    for d in demos:
        shots += [{"role": "user", "content": d.prompt}, {"role": "assistant", "content": d.completion}]
    return head + shots + msgs


@dataclasses.dataclass(frozen=True)
class IclPair:
    teacher: Rendered
    student: Rendered
    teacher_positions: list[int]
    student_positions: list[int]
    num_demos: int


def _positions(r: Rendered) -> list[int]:
    s, e = r.spans[-1]
    return list(range(s, e))


def build_icl_pair(tokenizer, example: Example, demos: Sequence[Example], *,
                   enable_thinking: bool | None = None) -> IclPair:
    """Render teacher (demos + example) and student (example) views and align their completions."""
    student = render(tokenizer, example.messages, enable_thinking=enable_thinking, train_on="last_assistant")
    teacher = render(tokenizer, with_demos(example.messages, demos), enable_thinking=enable_thinking,
                     train_on="last_assistant")
    sp, tp = _positions(student), _positions(teacher)
    s_ids = [student.input_ids[i] for i in sp]
    t_ids = [teacher.input_ids[i] for i in tp]
    if s_ids != t_ids:
        raise RenderError(f"teacher and student completions tokenise differently for {example.uid} "
                          f"({len(t_ids)} vs {len(s_ids)} tokens); distillation positions would not align")
    return IclPair(teacher=teacher, student=student, teacher_positions=tp, student_positions=sp,
                   num_demos=len(demos))


@dataclasses.dataclass(frozen=True)
class TeacherView:
    """An ICL item's teacher fields (``fields``, merged into the training item) and how it was made."""

    fields: dict[str, Any]
    num_demos: int
    demos_dropped: int

    @property
    def teacher_tokens(self) -> int:
        return len(self.fields["teacher_input_ids"])


def teacher_view(tokenizer, example: Example, item: Mapping[str, Any], demos: Sequence[Example],
                 icl: IclSettings) -> TeacherView:
    """The teacher's view of ``example`` with ``demos`` in context, aligned with the training ``item``.

    ``item`` is the student as trained: ``input_ids`` (the rendering after the length policy, possibly
    cut on the left) and ``is_replay``. The teacher reads the whole conversation (never cut), preceded
    by the demonstrations that survive the rules in the module docstring; its view ends at its last
    completion token. Raises :class:`DataError` naming the row when the views cannot be aligned.
    """
    location = f"{example.source}:{example.row_id}"
    if item.get("is_replay") and not icl.on_replay:
        demos = []
    demos = list(demos)
    dropped = 0
    while True:
        try:
            pair = build_icl_pair(tokenizer, example, demos, enable_thinking=icl.enable_thinking)
        except RenderError as e:
            raise DataError("render_failed", str(e), location=location, field="messages") from None
        if icl.teacher_max_length is None or len(pair.teacher) <= icl.teacher_max_length or not demos:
            break
        demos = demos[1:]
        dropped += 1
    s_end = pair.student.spans[-1][1]
    ids = np.asarray(item["input_ids"]).tolist()
    s_off = s_end - len(ids)
    if s_off < 0 or pair.student.input_ids[s_off:s_end] != ids:
        raise DataError("render_failed", "the student view differs from the training item (was it rendered with "
                        "another enable_thinking or template?)", location=location, field="messages")
    t_end = pair.teacher_positions[-1] + 1
    t_mask = np.zeros(t_end, dtype=np.int8)
    t_mask[pair.teacher_positions] = 1
    fields = {"teacher_input_ids": np.asarray(pair.teacher.input_ids[:t_end], dtype=np.int64),
              "teacher_loss_mask": t_mask,
              "student_positions": np.asarray(pair.student_positions, dtype=np.int64) - s_off,
              "teacher_positions": np.asarray(pair.teacher_positions, dtype=np.int64),
              "num_demos": len(demos)}
    return TeacherView(fields=fields, num_demos=len(demos), demos_dropped=dropped)


def identity_teacher_view(item: dict[str, Any]) -> dict[str, Any]:
    """Give an item the ICL fields of a 0-shot teacher: the same tokens, aligned position by position."""
    positions = np.nonzero(np.asarray(item["loss_mask"]))[0].astype(np.int64)
    item.update(teacher_input_ids=item["input_ids"], teacher_loss_mask=item["loss_mask"],
                student_positions=positions, teacher_positions=positions, num_demos=0)
    return item
