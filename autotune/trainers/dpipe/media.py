"""A ``[[directory]]``'s clips as diffusion-pipe enumerates them, read from the file headers alone.

autotune imports no image or video library, so this reads what bucketing needs (width, height,
frames) from PNG and JPEG headers and from an MP4/MOV's ``moov`` box; any other file is counted as
unread, and the messages say so. The enumeration follows ``utils/dataset.py`` @ 8f83dbf: every
file in the folder except ``.txt .npz .json .parquet .bak .db`` (lines 648-651), the caption the
same stem's ``.txt`` or ``captions.json`` (lines 652-656, 759-770); a video's frames are
``int(source_frames * model_fps / source_fps)`` (line 796).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from autotune.trainers.dpipe.buckets import Clip

#: dataset.py:650: never a sample.
SKIPPED_SUFFIXES = (".txt", ".npz", ".json", ".parquet", ".bak", ".db")
CAPTIONS_JSON = "captions.json"
#: The most files read per folder: past it the layout is not judged (a note says so).
MAX_FILES = 20000
_MP4 = (".mp4", ".mov", ".m4v")
#: The largest ``moov`` read (a long film's index): past it the file counts as unread.
MAX_MOOV = 64 * 1024 * 1024


@dataclass
class Folder:
    """What one folder holds, as far as the headers tell."""

    clips: list[Clip] = field(default_factory=list)
    #: Files no header reader here understands (their buckets are unknown).
    unread: int = 0
    #: Files the trainer skips for want of a caption (``skip_empty_caption``).
    no_caption: int = 0
    #: The folder held more than ``MAX_FILES`` files: nothing was read.
    too_many: bool = False


def read_folder(path: Path, model_fps: float | None, *, skip_empty_caption: bool = True) -> Folder:
    """The clips in ``path``; ``model_fps`` ``None`` keeps a video's own frame count."""
    folder = Folder()
    try:
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix not in SKIPPED_SUFFIXES)
    except OSError:
        return folder
    if len(files) > MAX_FILES:
        folder.too_many = True
        return folder
    captions_json = (path / CAPTIONS_JSON).exists()
    for file in files:
        if skip_empty_caption and not captions_json and not file.with_suffix(".txt").exists():
            folder.no_caption += 1
            continue
        clip = read_clip(file, model_fps)
        if clip is None:
            folder.unread += 1
        else:
            folder.clips.append(clip)
    return folder


def read_clip(file: Path, model_fps: float | None) -> Clip | None:
    """One file's (width, height, frames), or ``None`` when its header is not one read here."""
    try:
        with file.open("rb") as fh:
            head = fh.read(32)
            fh.seek(0)
            if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
                width, height = struct.unpack(">II", head[16:24])
                return Clip(width, height, 1)
            if head.startswith(b"\xff\xd8"):
                size = _jpeg_size(fh)
                return None if size is None else Clip(size[0], size[1], 1)
            if file.suffix.lower() in _MP4 or head[4:8] == b"ftyp":
                return _mp4_clip(fh, model_fps)
    except (OSError, struct.error, ValueError, ZeroDivisionError):
        return None
    return None


def _jpeg_size(fh: BinaryIO) -> tuple[int, int] | None:
    """The frame size in a JPEG's first SOFn segment."""
    fh.read(2)
    while True:
        marker = fh.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        kind = marker[1]
        (length,) = struct.unpack(">H", fh.read(2))
        if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):
            _, height, width = struct.unpack(">BHH", fh.read(5))
            return width, height
        fh.seek(length - 2, 1)


def _boxes(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[bytes, int, int]]:
    """ISO BMFF boxes in ``data[start:end]``: (type, payload start, payload end)."""
    out, pos, end = [], start, len(data) if end is None else end
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        header = 8
        if size == 1:
            (size,) = struct.unpack(">Q", data[pos + 8 : pos + 16])
            header = 16
        elif size == 0:
            size = end - pos
        if size < header:
            break
        out.append((kind, pos + header, min(pos + size, end)))
        pos += size
    return out


def _moov(fh: BinaryIO) -> bytes | None:
    """The file's ``moov`` box (it may sit after the media data): read whole, it is the index."""
    while True:
        header = fh.read(8)
        if len(header) < 8:
            return None
        size, kind = struct.unpack(">I4s", header)
        skip = size - 8
        if size == 1:
            (size,) = struct.unpack(">Q", fh.read(8))
            skip = size - 16
        if kind == b"moov":
            return None if skip > MAX_MOOV else fh.read(skip) if size else fh.read(MAX_MOOV)
        if size == 0 or skip < 0:
            return None
        fh.seek(skip, 1)


def _child(data: bytes, box: tuple[bytes, int, int], kind: bytes) -> tuple[bytes, int, int] | None:
    return next((b for b in _boxes(data, box[1], box[2]) if b[0] == kind), None)


def _mp4_clip(fh: BinaryIO, model_fps: float | None) -> Clip | None:
    """The first video track: its sample entry's size, its sample count, its duration."""
    moov = _moov(fh)
    if moov is None:
        return None
    for trak in (b for b in _boxes(moov) if b[0] == b"trak"):
        mdia = _child(moov, trak, b"mdia")
        hdlr = mdia and _child(moov, mdia, b"hdlr")
        if not mdia or not hdlr or moov[hdlr[1] + 8 : hdlr[1] + 12] != b"vide":
            continue
        mdhd = _child(moov, mdia, b"mdhd")
        minf = _child(moov, mdia, b"minf")
        stbl = minf and _child(moov, minf, b"stbl")
        stsd = stbl and _child(moov, stbl, b"stsd")
        stsz = stbl and _child(moov, stbl, b"stsz")
        if not mdhd or not stsd or not stsz:
            return None
        p = mdhd[1]
        if moov[p] == 1:
            timescale, duration = struct.unpack(">IQ", moov[p + 20 : p + 32])
        else:
            timescale, duration = struct.unpack(">II", moov[p + 12 : p + 20])
        (count,) = struct.unpack(">I", moov[stsz[1] + 8 : stsz[1] + 12])
        if count == 0:
            return None  # a fragmented MP4 keeps its samples in moof boxes: unread, not a 0-frame clip
        entry = stsd[1] + 8 + 8  # version/flags, entry count; then the entry's size and type
        width, height = struct.unpack(">HH", moov[entry + 24 : entry + 28])
        frames = count
        if model_fps is not None and duration and timescale:
            frames = int(count * model_fps / (count * timescale / duration))
        return Clip(width, height, frames)
    return None
