"""The learning side: networks, value transforms, targets, losses and the replicated update."""

__all__: list[str] = []
