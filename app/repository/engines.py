"""The engines of served model versions, one per instance: made, started, supervised (each
instance's engine on its own) and stopped, for the registry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel
from app.repository.supervision import (
    EngineFactory,
    EngineSupervisor,
    MigrationListener,
    RestartListener,
    RestartPolicy,
    stop_quietly,
)

logger = logging.getLogger(__name__)


def new_served_model(
    spec: ModelSpec, factory: EngineFactory, max_pending: int | None, allow_pin: bool
) -> ServedModel:
    """A model version with an engine (not started) for each of its instances."""
    engines = [factory(spec.for_instance(instance)) for instance in spec.instance_plan]
    return ServedModel(spec, engines=engines, max_pending=max_pending, allow_pin=allow_pin)


async def start_engines(served: ServedModel) -> None:
    """Start the version's engines one after another (their processes start one at a time
    anyway, app/engine/placement.py); READY once all are. A failure leaves it UNAVAILABLE
    and raises (the caller stops the engines started)."""
    several = len(served.slots) > 1
    logger.info("starting engine for model '%s' version %s", served.name, served.version)
    try:
        for slot in served.slots:
            if several:
                logger.info(
                    "model '%s' version %s: starting instance %s (%s)",
                    served.name,
                    served.version,
                    slot.instance.name,
                    slot.instance.describe(),
                )
            await slot.engine.start()
            slot.state = ModelState.READY
    except BaseException:
        served.state = ModelState.UNAVAILABLE
        raise
    served.state = ModelState.READY
    logger.info("model '%s' version %s is ready", served.name, served.version)


async def stop_engines(served_versions: Sequence[ServedModel]) -> None:
    """Stop every engine of these versions; one failing to stop does not keep the others."""
    for served in served_versions:
        served.state = ModelState.UNAVAILABLE
    engines = [engine for served in served_versions for engine in served.engines]
    await asyncio.gather(*(stop_quietly(engine) for engine in engines))


class Supervision:
    """The supervisors of the served versions' instances, one per engine."""

    def __init__(
        self,
        factory: EngineFactory,
        policy: RestartPolicy,
        on_restart: RestartListener,
        on_migration: MigrationListener,
    ) -> None:
        self._factory = factory
        self._policy = policy
        self._on_restart = on_restart
        self._on_migration = on_migration
        self.supervisors: dict[int, list[EngineSupervisor]] = {}
        """id(served model) -> the supervisor of each of its instances."""

    def start(self, served: ServedModel) -> None:
        supervisors = [
            EngineSupervisor(
                served, self._factory, self._policy, self._on_restart, self._on_migration, slot
            )
            for slot in served.slots
        ]
        self.supervisors[id(served)] = supervisors
        for supervisor in supervisors:
            supervisor.start()

    async def stop(self, served_versions: Sequence[ServedModel]) -> None:
        supervisors = [
            supervisor
            for served in served_versions
            for supervisor in self.supervisors.pop(id(served), [])
        ]
        await asyncio.gather(*(supervisor.stop() for supervisor in supervisors))
