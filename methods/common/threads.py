"""torch's intra-op threads, lowered for a while and given back.

Operations too small to gain from splitting (an MLP's, a sampler's) stall when split:
each waits for a second thread whose core another process may hold (40x slower on two
cores with one busy, docs/RESULTS.md). The inner loop's batched path and a method's
``threads`` choice for a whole run (``Method.execution_choices``) both lower the count
through :func:`intra_op_threads`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def intra_op_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads at ``count`` (never above the process's own; None: as
    they are) while inside, restored after."""
    before = torch.get_num_threads()
    wanted = before if count is None else max(1, min(count, before))
    if wanted == before:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)
