"""A small file is read and split in one go; one that grew after its size was taken is
read chunk by chunk from its start, to its end, as a large file is."""

from __future__ import annotations

import os
from pathlib import Path

from sessionkit.nanobot import reader


def test_a_file_grown_after_its_size_was_taken_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "cli_1.jsonl"
    path.write_bytes(b'{"a": 1}\r\n{"b": 2}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        assert [list(b) for b in reader._read_batches(fd, size)] == [[b'{"a": 1}', b'{"b": 2}']]
        os.lseek(fd, 0, os.SEEK_SET)
        with path.open("ab") as grow:
            grow.write(b'{"c": 3}\r{"d": 4}')
        batches = [list(b) for b in reader._read_batches(fd, size)]
    finally:
        os.close(fd)
    assert [line for batch in batches for line in batch] == [
        b'{"a": 1}',
        b'{"b": 2}',
        b'{"c": 3}',
        b'{"d": 4}',
    ]
    assert len(batches) > 1  # read chunk by chunk: a whole read gives one batch
