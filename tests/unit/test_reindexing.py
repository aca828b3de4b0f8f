"""Whose queued re-index starts next (reindexing.Turns): tenants take turns, and none waits for ever."""
from __future__ import annotations

from appliance.library.reindexing import ReindexJob, Turns


def _job(tenant: str, partition: str) -> ReindexJob:
    return ReindexJob(tenant, partition, None, False, 0.0)


def _run_in_order(turns: Turns, queued: list[ReindexJob]) -> list[str]:
    order = []
    while queued:
        job = turns.pick(queued)
        queued.remove(job)
        turns.started(job, queued)
        order.append(job.partition)
    return order


def test_a_tenant_that_queues_many_takes_turns_with_the_others():
    turns, queued = Turns(), []
    for tenant, partition in (("g", "g0"), ("g", "g1"), ("g", "g2"), ("d", "d0"), ("b", "b0"), ("g", "g3")):
        turns.join(tenant)
        queued.append(_job(tenant, partition))
    assert _run_in_order(turns, queued) == ["g0", "d0", "b0", "g1", "g2", "g3"]


def test_one_that_joins_goes_before_the_tenant_running_but_behind_those_waiting():
    turns, queued = Turns(), []
    turns.join("x")
    running = _job("x", "x0")
    turns.started(running, queued)
    for tenant, partition in (("x", "x1"), ("y", "y0")):  # x queues its next while x0 runs, then y arrives
        turns.join(tenant)
        queued.append(_job(tenant, partition))
    assert turns.pick(queued).partition == "y0", "x was just served"


def test_two_tenants_taking_turns_cannot_keep_a_third_waiting():
    """y and a each queue their next while their last runs; x has waited all along. When a tenant new to the queue
    counted as never served, y and a overtook x for ever."""
    turns, queued, started = Turns(), [], []

    def ask(tenant: str, partition: str) -> None:
        turns.join(tenant)
        queued.append(_job(tenant, partition))

    def start_next() -> str:
        job = turns.pick(queued)
        queued.remove(job)
        turns.started(job, queued)
        started.append(job.partition)
        return job.tenant

    ask("x", "x0")
    start_next()
    ask("x", "x1")
    ask("y", "y0")
    for n in range(1, 6):  # whoever runs, the other of y and a asks again
        tenant = start_next()
        if "x1" in started:
            break
        ask("a" if tenant == "y" else "y", f"{'a' if tenant == 'y' else 'y'}{n}")
    assert "x1" in started[:3], started


def test_a_copy_predicts_without_changing_the_turns():
    turns, queued = Turns(), []
    for tenant, partition in (("a", "a0"), ("a", "a1"), ("b", "b0")):
        turns.join(tenant)
        queued.append(_job(tenant, partition))
    predicted = _run_in_order(turns.copy(), list(queued))
    assert predicted == _run_in_order(turns, queued) == ["a0", "b0", "a1"]
