"""Child processes that each hold one core for minutes (cold compiles for another CPU), started
together in a module fixture, as many at once as the machine has cores, instead of one test
after another: each test then takes its own run's result."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def selected(request: pytest.FixtureRequest, test_name: str) -> list[Any]:
    """The collected items of the test function `test_name` (its parameter sets) in this session."""
    return [item for item in request.session.items if getattr(item, "originalname", "") == test_name]


@contextmanager
def together(jobs: dict[str, Callable[[], T]]) -> Iterator[dict[str, Future[T]]]:
    """Each job started at once in a pool of one thread per core; the futures by name. Leaving
    waits for every job (a test that failed early leaves no child process behind)."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        yield {name: pool.submit(job) for name, job in jobs.items()}
