"""Every module in this package defines commands on `llamacli.cli.app`; importing the
package registers them all (a new command is a new module here)."""

from __future__ import annotations

import importlib
import pkgutil


def register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")
