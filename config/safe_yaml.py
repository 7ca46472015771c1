"""YAML that people and other programs send us, read without aliases.

``yaml.safe_load`` builds no arbitrary objects, but it keeps anchors and aliases as shared
references: about 800 bytes of nested aliases (``b: [*a, *a]``, ``c: [*b, *b]``, …) make a
structure whose walk doubles with every level, and every walker afterwards (a JSON Schema
check, redaction, a copy) expands it in full, holding the process for minutes to days; an
alias to its own parent makes a cycle that recursion never leaves. No document this project
reads needs them, so a document with an alias is refused with the line, and one nested past
what the parser can recurse is a clear error too, never a 500.
"""

from __future__ import annotations

from typing import Any

import yaml


class PlainSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (``*name``, and so ``<<: *name`` merges)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases (*{event.anchor}) are not accepted here: write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


class PlainSafeDumper(yaml.SafeDumper):
    """SafeDumper that writes a value used twice out twice, never as &anchor / *alias, so
    what it writes reads back with ``PlainSafeLoader``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def yaml_load_plain(text: str | bytes, *, loader: type[PlainSafeLoader] = PlainSafeLoader) -> Any:
    """Parse ``text`` with ``loader`` (PlainSafeLoader or a subclass); a document nested too
    deeply to parse raises yaml.YAMLError like any other bad document."""
    try:
        return yaml.load(text, Loader=loader)
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
