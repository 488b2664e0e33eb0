"""The report's auto blocks: the content between ``<!-- auto:NAME -->`` and ``<!-- /auto:NAME -->``.

Markers must stand alone on their line (so the syntax can be quoted inline in prose without being treated
as a block). ``replace_blocks`` rewrites only the content of known blocks; every other byte is kept.
"""

from __future__ import annotations

import re

from lipgnn.errors import ConfigError

_MARKER = re.compile(r"^[ \t]*<!--[ \t]*(/?)auto:([A-Za-z0-9_.-]+)[ \t]*-->[ \t]*\r?$", re.MULTILINE)


def open_marker(name: str) -> str:
    return f"<!-- auto:{name} -->"


def close_marker(name: str) -> str:
    return f"<!-- /auto:{name} -->"


def block_names(text: str) -> list[str]:
    """Names of the blocks opened in ``text``, in order."""
    return [m.group(2) for m in _MARKER.finditer(text) if m.group(1) != "/"]


def replace_blocks(text: str, blocks: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """``text`` with the content between each known block's markers replaced by its body.

    Returns (new text, names of the blocks replaced, names of unknown blocks left as they were). Bytes
    outside the replaced contents are kept exactly. Raises ConfigError on unbalanced or nested markers
    (nothing is written then).
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    out, found, unknown = [], [], []
    pos, opened = 0, None
    for m in _MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not closing:
            if opened is not None:
                raise ConfigError(f"report line {line}: {open_marker(name)} opens inside the unclosed block "
                                  f"{opened.group(2)!r}: add {close_marker(opened.group(2))} before it")
            opened = m
            continue
        if opened is None or opened.group(2) != name:
            raise ConfigError(f"report line {line}: {close_marker(name)} has no matching {open_marker(name)} "
                              "before it: add the opening marker or delete this line")
        if name in blocks:
            start = opened.end() + 1  # the content begins after the opening marker's line break
            body = blocks[name].strip("\n").replace("\r\n", "\n").replace("\n", newline)
            out += [text[pos:start], newline, body, newline, newline]
            pos = m.start()
            found.append(name)
        else:
            unknown.append(name)
        opened = None
    if opened is not None:
        line = text.count("\n", 0, opened.start()) + 1
        raise ConfigError(f"report line {line}: {open_marker(opened.group(2))} is never closed: add "
                          f"{close_marker(opened.group(2))} after its content")
    out.append(text[pos:])
    return "".join(out), found, unknown
