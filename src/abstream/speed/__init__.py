"""The speed layer: streaming components, running them, and their progress."""

from abstream.speed.component import Component, Context
from abstream.speed.components import COMPONENTS, pipeline_components, select
from abstream.speed.runner import pipeline, run_once

__all__ = ["COMPONENTS", "Component", "Context", "pipeline", "pipeline_components", "run_once",
           "select"]
