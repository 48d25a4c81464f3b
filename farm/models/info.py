"""`ModelInfo`: a model file ready to deploy (what build.py resolves and the bench runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from farm.models.config import ModelConfig


@dataclass(frozen=True)
class ModelInfo:
    """A model file ready to deploy. preset/config are None for a user-supplied file."""

    path: Path
    sha256: str
    preset: str | None
    variant: str
    config: ModelConfig | None

    @property
    def name(self) -> str:
        """Short human name: preset-variant, or the file stem."""
        if self.preset:
            return f"{self.preset}-{self.variant}"
        return self.path.stem if self.variant == "fp32" else f"{self.path.stem}-{self.variant}"

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size
