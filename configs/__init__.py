"""The experiment's typed, frozen, validated config and its named presets.

`load_config(NAME_OR_PATH, ["section.field=value", ...])` is what `podracer train` calls;
`to_dict`/`from_dict` round-trip a config through the run directory's `config.json`.
"""

from configs import presets
from configs.errors import UsageError
from configs.experiment import (
    MAX_SEED,
    MODES,
    MUTABLE,
    RUNTIMES,
    ActorConfig,
    DevicesConfig,
    EnvConfig,
    EvaluationConfig,
    ExperimentConfig,
    LearnerConfig,
    LoggingConfig,
    ReplayConfig,
)
from configs.loading import (
    apply_overrides,
    describe_fields,
    from_dict,
    load_config,
    to_dict,
    with_predated_fields,
)

__all__ = [
    "MAX_SEED",
    "MODES",
    "MUTABLE",
    "RUNTIMES",
    "ActorConfig",
    "DevicesConfig",
    "EnvConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "LearnerConfig",
    "LoggingConfig",
    "ReplayConfig",
    "UsageError",
    "apply_overrides",
    "describe_fields",
    "from_dict",
    "load_config",
    "presets",
    "to_dict",
    "with_predated_fields",
]
