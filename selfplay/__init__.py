"""The Sebulba self-play runtime: environments, actors, replay, learner loop, checkpoints."""

__all__: list[str] = []
