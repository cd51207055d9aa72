# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The one error base of the collection.

Every typed error in ``module_utils`` derives from ``GpufleetError``, so a module or filter can
catch one class and turn it into ``fail_json`` or ``AnsibleFilterError``. Bad input is a
``FieldError``: it carries the field as the user spells it (``gpufleet_node_pools[1].name``),
so the message points at the line to fix.

Pure: no I/O.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base of every error the collection raises on purpose."""


class FieldError(GpufleetError, ValueError):
    """A field has a bad value; ``field`` names it, ``message`` says what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__("%s: %s" % (field, message))
        self.field = field
        self.message = message
