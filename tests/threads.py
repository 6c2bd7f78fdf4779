"""A call in a thread of its own (a fit that another session disturbs), its exception kept."""

from __future__ import annotations

import threading


def started(call, *args) -> tuple[threading.Thread, list[BaseException]]:
    """``call(*args)`` running in a new thread, and the list that gets what it raises."""
    raised: list[BaseException] = []

    def run():
        try:
            call(*args)
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, raised
