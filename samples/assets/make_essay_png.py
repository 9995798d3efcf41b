"""Writes essay.png: a 48x32 picture of a sun over the sea (the essay judge's sample image).

Pure standard library (zlib + struct), so the asset can be regenerated anywhere:
    python samples/assets/make_essay_png.py
"""
import os
import struct
import zlib

WIDTH, HEIGHT = 48, 32


def pixel(x: int, y: int) -> tuple[int, int, int]:
    if (x - 32) ** 2 + (y - 10) ** 2 <= 36:
        return (250, 200, 40)  # the sun
    if y < 18:
        return (120, 180, 235)  # the sky
    return (20, 70, 140) if (x + y) % 7 else (230, 240, 250)  # the sea, with a few wave crests


def png_bytes() -> bytes:
    rows = b"".join(b"\x00" + bytes(c for x in range(WIDTH) for c in pixel(x, y)) for y in range(HEIGHT))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", WIDTH, HEIGHT, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "essay.png")
    with open(path, "wb") as out:
        out.write(png_bytes())
    print(f"wrote {path}")
