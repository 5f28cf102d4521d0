"""Reading the files users write (policies, catalogs): bytes in, text or YAML out, bad input as
one line.

A user file is read as bytes with a size limit and decoded as UTF-8 (a byte-order mark is
allowed), so a Latin-1 comment or a UTF-16 file gives a message naming the byte and its offset
instead of a ``UnicodeDecodeError``. YAML is composed by a loader that stops at a nesting depth
(PyYAML's composer recurses and would hit Python's recursion limit) and at an expanded node count
(aliases are shared when loaded, but walking or validating the document expands them: nine levels
of nine aliases is 387 million nodes).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import BurstError

MAX_BYTES = 1 << 20  # a policy is a few hundred bytes; the shipped catalog is ~20 kB
MAX_DEPTH = 32  # a policy nests three levels
MAX_NODES = 20_000  # every node of the document, aliases expanded


def read_text(path: Path, what: str, hint: str = "") -> str:
    """The file's text; one-line ``BurstError`` for a missing, huge, binary or non-UTF-8 file
    (``hint`` follows the message for an unreadable one, e.g. where the examples are)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise BurstError(f"cannot read {what} {path}: {exc.strerror or exc}{hint}") from None
    if len(data) > MAX_BYTES:
        raise BurstError(f"{path}: {what} is over {MAX_BYTES // 1024} KiB; is this the right file?")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BurstError(f"{path}: {what} is UTF-16 text; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BurstError(f"{path}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise BurstError(f"{path}: {what} is a binary file (NUL byte at offset {text.index(chr(0))}), not text")
    return text


class _TooDeep(yaml.YAMLError):
    pass


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses documents nested deeper than ``MAX_DEPTH``."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooDeep(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, limit: int) -> int:
    """Nodes in the document with every alias expanded, counted up to ``limit`` + 1 (no further)."""
    count, stack = 0, [node]
    while stack:
        current = stack.pop()
        count += 1
        if count > limit:
            return count
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.extend((key, value))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return count


def compose_yaml(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """(composed node, loaded value) of a YAML document, within the limits above.

    Raises a one-line ``BurstError`` for malformed YAML (with its line) and for a document past a limit.
    """
    loader = _LimitedLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except _TooDeep as exc:
            raise BurstError(f"{source}: {exc}") from None
        if node is None:
            return None, None
        if _expanded_size(node, MAX_NODES) > MAX_NODES:
            raise BurstError(f"{source}: the document expands to more than {MAX_NODES} YAML nodes (aliases?); write it out plainly")
        return node, loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise BurstError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    finally:
        loader.dispose()


def key_path(lines: dict, loc) -> tuple:
    """The parts of a pydantic error location that are keys of the document (pydantic adds union
    branches and literal tags to it), to find the error's line in ``key_lines``."""
    path: tuple = ()
    for part in loc:
        if path + (part,) in lines:
            path += (part,)
    return path


def key_lines(node, path: tuple = ()) -> dict:
    """Map every key path of a composed YAML document to its 1-based line (for errors that name it)."""
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            lines[sub] = key.start_mark.line + 1
            lines.update({k: v for k, v in key_lines(value, sub).items() if k != sub})
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(key_lines(item, path + (i,)))
    return lines
