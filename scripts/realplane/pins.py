"""The pinned releases of the real control plane (pins.toml beside this module)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

PINS_FILE = Path(__file__).with_name("pins.toml")


@dataclass(frozen=True)
class Pin:
    name: str
    module: str
    version: str


class Pins(dict[str, Pin]):
    """Component name -> pin, in the file's order."""

    @classmethod
    def load(cls, path: Path = PINS_FILE) -> Pins:
        data = tomllib.loads(path.read_text())
        pins = cls()
        for name, entry in data.items():
            module, version = entry.get("module"), entry.get("version")
            if not isinstance(module, str) or not isinstance(version, str) or not version.startswith("v"):
                raise ValueError(f'{path}: [{name}] needs module = "..." and version = "vX.Y.Z"')
            pins[name] = Pin(name=name, module=module, version=version)
        return pins
