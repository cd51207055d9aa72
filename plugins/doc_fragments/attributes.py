# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The ``attributes:`` blocks every module repeats, written once.

Use as ``extends_documentation_fragment: [gpufleet.resilience.attributes,
gpufleet.resilience.attributes.check_mode_read_only]`` (or ``.check_mode_full``) and add the
``support`` of each attribute that differs.
"""

from __future__ import annotations


class ModuleDocFragment:
    # Every module: the attribute descriptions, without a support level.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    # A module that only reads: the same in check mode, nothing to diff.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""
