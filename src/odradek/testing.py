"""pytest plugin (registered as `odradek` through the pytest11 entry point).

    def test_my_pipeline(odradek_cluster):            # 3 brokers, fresh for the test
        producer = Producer({"bootstrap.servers": odradek_cluster.bootstrap_servers})

    @pytest.mark.odradek_cluster(brokers=1, overrides={"num.partitions": "4"})
    def test_small(odradek_cluster): ...

`odradek_cluster_factory(brokers=..., **kwargs)` starts more clusters inside one test; all are
stopped at teardown.

A secured cluster (certificates generated for the test, users and ACLs declared in code):

    @pytest.mark.odradek_cluster(brokers=3, security=ClusterSecurity(
        listeners=("SASL_SSL",), users={"alice": "alice-secret"},
        acls=[ClusterAcl("User:alice", "Write", "Topic", "events")]))
    def test_secured(odradek_cluster):
        producer = Producer(odradek_cluster.client_config("alice", style="librdkafka"))

Faults (docs/faults.md): with ``network_faults=True`` the fixture's cluster can cut, slow and
heal links, pause brokers and cut them from the store:

    @pytest.mark.odradek_cluster(brokers=3, network_faults=True)
    def test_partition(odradek_cluster):
        handle = odradek_cluster.faults.partition([0], [1, 2, "store"])
        ...
        odradek_cluster.faults.heal(handle)

`odradek_secure_cluster` is the same with a default: 3 brokers, one SASL_SSL listener with
SCRAM-SHA-256, users alice and bob, no authorizer (override it with the marker's ``security``).

Simulated (docs/simulation.md): an ``async def`` test marked ``simulation`` runs on the
deterministic simulation's loop (virtual time, the simulated network, every choice from the
seed); the ``simulation`` fixture is its `odradek.sim.Simulation`, and a cluster made with it
runs there. On a failure the last events of the run's digest are added to the report.

    @pytest.mark.simulation(seed=7)
    async def test_my_app(simulation):
        async with AsyncCluster(3, simulation=simulation) as cluster:
            ...   # asyncio code, odradek.client clients: unchanged
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .cluster import Cluster, ClusterSecurity

if TYPE_CHECKING:
    from .sim.simulation import Simulation

#: How many of the digest's last events a failed simulated test reports.
SIMULATION_TAIL = 30

#: `odradek_secure_cluster`'s default security.
DEFAULT_SECURITY = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                                   users={"alice": "alice-secret", "bob": "bob-secret"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek_cluster(brokers=3, **kwargs): options of the odradek_cluster fixture")
    config.addinivalue_line(
        "markers", "simulation(seed=0, **kwargs): run the async test on odradek.sim's "
        "Simulation(seed, **kwargs) (the simulation fixture)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``simulation`` gets the ``simulation`` fixture even if it does not name
    it: its loop runs the test."""
    for item in items:
        if item.get_closest_marker("simulation") is not None \
                and "simulation" not in getattr(item, "fixturenames", ("simulation",)):
            item.fixturenames.append("simulation")  # type: ignore[attr-defined]


@pytest.fixture
def simulation(request: pytest.FixtureRequest) -> Simulation:
    """The test's `Simulation`: seed and options from its ``simulation`` marker (seed 0)."""
    from .sim.simulation import Simulation

    marker = request.node.get_closest_marker("simulation")
    args = marker.args if marker else ()
    kwargs = dict(marker.kwargs) if marker else {}
    if not args:
        kwargs.setdefault("seed", 0)
    return Simulation(*args, **kwargs)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test marked ``simulation`` to completion on the simulation."""
    if pyfuncitem.get_closest_marker("simulation") is None:
        return None
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"{pyfuncitem.name}: a test marked simulation must be async def")
    sim: Simulation = pyfuncitem.funcargs["simulation"]  # type: ignore[assignment]
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}

    async def main(_: Simulation) -> None:
        await func(**kwargs)

    try:
        sim.run(main)
    except BaseException as exc:
        tail = list(sim.digest.tail)[-SIMULATION_TAIL:]
        exc.add_note(f"simulation seed {sim.seed}, virtual {sim.now:.6f} s, "
                     f"{sim.digest.events} events; the last {len(tail)}:\n"
                     + "\n".join(f"  {line}" for line in tail))
        raise
    return True


@pytest.fixture
def odradek_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(brokers: int = 3, **kwargs: Any) -> Cluster:
        kwargs.setdefault("data_dir", tmp_path / f"odradek-cluster-{len(started)}")
        cluster = Cluster(brokers, **kwargs).start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def odradek_cluster(request: pytest.FixtureRequest,
                    odradek_cluster_factory: Callable[..., Cluster]) -> Cluster:
    marker = request.node.get_closest_marker("odradek_cluster")
    kwargs = dict(marker.kwargs) if marker else {}
    return odradek_cluster_factory(**kwargs)


@pytest.fixture
def odradek_secure_cluster(request: pytest.FixtureRequest,
                           odradek_cluster_factory: Callable[..., Cluster]) -> Cluster:
    """A secured cluster: `DEFAULT_SECURITY` unless the odradek_cluster marker gives one."""
    marker = request.node.get_closest_marker("odradek_cluster")
    kwargs = dict(marker.kwargs) if marker else {}
    kwargs.setdefault("security", DEFAULT_SECURITY)
    return odradek_cluster_factory(**kwargs)
