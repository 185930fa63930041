"""locsum: train, export and serve locality-aware long-input summarizers."""

import logging

__version__ = "0.1.0"

logging.getLogger("locsum_sdk").addHandler(logging.NullHandler())

from .errors import LocsumError  # noqa: E402
from .generation import GenerationOptions  # noqa: E402
from .live import LiveDocument  # noqa: E402
from .summarizer import Summarizer, Summary  # noqa: E402
from .unit_cache import UnitCache  # noqa: E402
from .units import PagingOptions, Unit  # noqa: E402

__all__ = ["GenerationOptions", "LiveDocument", "LocsumError", "PagingOptions", "Summarizer", "Summary", "Unit",
           "UnitCache", "__version__"]
