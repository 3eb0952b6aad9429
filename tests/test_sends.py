"""pregel.sends: the send thread posts what it is given in order, keeps every buffer until its send
completes, and hands its errors to the compute thread (a recording stand-in for ``pregel.comm.Comm``)."""
import numpy as np
import pytest

from pregel.sends import SEND_CHECK, Requests, Sends, SendThread


class _Recording:
    """Records isend calls; a request completes when ``testsome`` or ``waitall`` looks at it."""

    def __init__(self, fail_at: int = -1):
        self.posted, self.fail_at, self.waited = [], fail_at, []

    def isend(self, buf, dest, tag):
        if len(self.posted) == self.fail_at:
            raise RuntimeError(f"isend {self.fail_at} failed")
        self.posted.append((buf, dest, tag))
        return len(self.posted) - 1

    @staticmethod
    def testsome(requests):
        return [i for i, r in enumerate(requests) if r is not None]

    def waitall(self, requests):
        self.waited.extend(requests)


@pytest.mark.parametrize("cls", [Sends, SendThread])
def test_messages_are_posted_in_the_order_given_and_all_completed(cls):
    comm = _Recording()
    sends = cls(comm)
    given = [(np.full(i % 5, i, np.float32), i % 3, 1000 + i) for i in range(10 * SEND_CHECK + 3)]
    for payload, dest, tag in given:
        sends.post(payload, dest, tag)
    sends.close()
    assert [(d, t) for _, d, t in comm.posted] == [(d, t) for _, d, t in given]
    assert all(a is b for (a, _, _), (b, _, _) in zip(comm.posted, given))  # the buffers themselves, no copies
    # completed sends are collected at every SEND_CHECK-th post (here all have completed by then), so the
    # last len(given) % SEND_CHECK are the ones waited for at the end
    assert comm.waited == list(range(len(given) - len(given) % SEND_CHECK, len(given)))


def test_an_error_on_the_send_thread_reaches_the_compute_thread():
    sends = SendThread(_Recording(fail_at=2))
    for i in range(3):
        sends.post(np.zeros(1, np.float32), 1, i)
    with pytest.raises(RuntimeError, match="isend 2 failed"):
        sends.close()
    assert not sends.thread.is_alive()


def test_requests_forget_completed_items():
    requests = Requests()
    for i in range(6):
        requests.add(f"r{i}", i)
    assert requests.completed([1, 4]) == [1, 4] and requests.open == 4 and len(requests.requests) == 6
    assert requests.completed([0, 2]) == [0, 2] and bool(requests)  # 2 open of 6: the list is compacted
    assert requests.requests == ["r3", "r5"] and requests.items == [3, 5]
    requests.completed([0, 1])
    assert not requests
