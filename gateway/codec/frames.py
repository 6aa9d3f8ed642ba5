"""A run of tokens' frames written from one byte template.

A renderer's token events differ from one to the next only in a few values (the text, an id, a
position). Filled one `bytes % values` at a time, each costs a format-string parse and a tuple;
a run's frames are instead laid out as one list of the template's pieces and the values between
them, and joined once.
"""

from collections.abc import Sequence

from gateway import jsonutil


def template_pieces(template: bytes, holes: int) -> tuple[bytes, ...]:
    """`template`'s bytes around its `holes` (`%b` or `%d`, in order) for `filled`."""
    pieces = tuple(template.replace(b"%d", b"%b").split(b"%b"))
    if len(pieces) != holes + 1:
        raise ValueError(f"a frame template with {len(pieces) - 1} holes where {holes} were expected")
    return pieces


def filled(pieces: Sequence[bytes], columns: Sequence[list[bytes]]) -> bytes:
    """One frame a row, all rows joined: for each `i`, `pieces[0] + columns[0][i] + pieces[1] +
    ... + columns[-1][i] + pieces[-1]` (one column per hole, every column as long; no rows, no
    bytes)."""
    holes = len(columns)
    rows = len(columns[0])
    if not rows:
        return b""
    step = 2 * holes
    parts = [b""] * (step * rows + 1)
    parts[0] = pieces[0]
    for j, column in enumerate(columns):
        parts[1 + 2 * j :: step] = column
        # After the last hole: the frame's end and the next frame's start.
        after = pieces[j + 1] if j + 1 < holes else pieces[holes] + pieces[0]
        parts[2 + 2 * j :: step] = [after] * rows
    parts[-1] = pieces[holes]
    return b"".join(parts)


def filled_texts(pieces: Sequence[bytes], columns: Sequence[list[bytes]], texts: list[str]) -> bytes:
    """`filled` with the texts, each a JSON string, for the template's last hole: their contents
    cut from one encoding of the list, the quotes moved into the pieces around the hole, where
    the list can be cut (jsonutil.string_contents); else each text encoded on its own."""
    contents = jsonutil.string_contents(texts)
    if contents is None:
        return filled(pieces, [*columns, list(map(jsonutil.dumps, texts))])
    quoted = (*pieces[:-2], pieces[-2] + b'"', b'"' + pieces[-1])
    return filled(quoted, [*columns, contents])
